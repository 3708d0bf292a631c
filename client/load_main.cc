// convserve-load: loads a graph (weights from a seed when the file has none)
// on one or more servers and sends inference requests. Without a load mode
// it sends --requests one after another and prints a summary of the first
// output and the latencies; with --concurrency_range (closed loop) or
// --request_rate (open loop) it measures throughput and latency per level
// like perf_analyzer. docs/load-generator.md describes every flag.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/graph_file.h"
#include "client/load_generator.h"
#include "client/load_report.h"
#include "client/load_session.h"
#include "client/signal_cleanup.h"
#include "client/tensor_summary.h"
#include "engine/runtime/malloc_tuning.h"

ABSL_FLAG(std::string, server, "localhost:8001",
          "host:port, a comma-separated list (requests round-robin), or a gRPC target such as "
          "dns:///name:port (round_robin over what it resolves to)");
ABSL_FLAG(std::string, graph_file, "",
          "graph definition to load (protobuf text format, JSON if it ends in .json, binary "
          "GraphDef if it ends in .pb or .binpb)");
ABSL_FLAG(std::string, graph, "", "an already loaded graph to use (name or id)");
ABSL_FLAG(uint64_t, seed, 1, "seed for weights the graph file leaves empty");
ABSL_FLAG(bool, fill_bias, true, "also fill empty biases from --seed");
ABSL_FLAG(std::string, input_shape, "",
          "logical input dims N,C,H,W (N,C,D,H,W for 3-D); default 1,C,32,32");
ABSL_FLAG(int64_t, batch, 0, "when > 0, the batch size N (replaces N of --input_shape)");
ABSL_FLAG(std::string, warmup_shapes, "input",
          "warm-up at load of the --graph_file graph (LoadGraph waits until plans for these "
          "shapes are built on every GPU of the server): input (the shape this run sends), "
          "server (the server's --warmup_shapes), none, or N:HxW entries such as 1:56x56,8:56x56 "
          "(C from the graph)");
ABSL_FLAG(uint64_t, input_seed, 7, "seed of the random input tensor");
ABSL_FLAG(std::string, input_file, "", "raw input bytes instead of a random tensor");
ABSL_FLAG(std::string, save_input, "", "write the input bytes sent to this file");
ABSL_FLAG(std::string, save_output, "", "write the first response's output bytes to this file");
ABSL_FLAG(std::string, protocol, "",
          "convserve (convserve.v1.Infer) or kserve (ModelInfer); default convserve, or kserve "
          "with --shared_memory or --streaming");
ABSL_FLAG(std::string, shared_memory, "none",
          "KServe only: none (tensors in the messages), system (POSIX shared memory; the server "
          "must run on this machine) or cuda (GPU memory by CUDA IPC; CUDA builds)");
ABSL_FLAG(int, cuda_device, 0, "with --shared_memory=cuda: the GPU holding the regions");
ABSL_FLAG(int, shared_memory_slots, 0,
          "with --shared_memory: output slots, the most requests in flight (0: the largest "
          "concurrency level; 64 in an open loop; 1 without a load mode)");
ABSL_FLAG(bool, streaming, false,
          "KServe only: send over one ModelStreamInfer stream per connection (--connections) "
          "instead of unary calls");
ABSL_FLAG(int, connections, 0,
          "connections to each server, taken in turn by the requests; 0: one per 16 "
          "requests in flight (the largest concurrency level, 64 in an open loop), at most 8");
ABSL_FLAG(int, requests, 1, "without a load mode: requests to send, one after another");
ABSL_FLAG(bool, unload, false, "unload the graph at the end");
ABSL_FLAG(double, wait_for_server, 0,
          "seconds to wait for the server to answer ServerLive before starting (0: no wait)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(30), "deadline of each request");
ABSL_FLAG(std::string, concurrency_range, "",
          "closed loop: requests in flight, start:end:step (1:64:x2, 1:8:+1) or one value");
ABSL_FLAG(std::string, request_rate, "",
          "open loop: requests per second, start:end:step or one value");
ABSL_FLAG(std::string, calls, "callback",
          "closed loop: callback (gRPC's callback API: a few threads for any concurrency, a "
          "hand-off between threads per call) or blocking (a thread per request in flight, "
          "gRPC's blocking API, as perf_analyzer); the open loop always uses callbacks");
ABSL_FLAG(std::string, arrival, "constant", "open loop send spacing: constant or poisson");
ABSL_FLAG(uint64_t, arrival_seed, 1, "seed of the Poisson arrival schedule");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1), "load before the first window, not measured");
ABSL_FLAG(absl::Duration, window, absl::Seconds(5), "length of a measurement window");
ABSL_FLAG(int64_t, window_requests, 0, "when > 0, windows of this many requests instead");
ABSL_FLAG(double, stability_percent, 10,
          "stable when the last --stable_windows windows' throughput and p99 are within this %");
ABSL_FLAG(int, stable_windows, 3, "windows that must agree");
ABSL_FLAG(int, max_windows, 10, "windows per level at most");
ABSL_FLAG(bool, verify, false,
          "check outputs against the CPU reference (needs --graph_file); mismatches fail the run");
ABSL_FLAG(int, verify_every, 10, "with --verify: check every n-th response (and the first)");
ABSL_FLAG(double, max_error_ratio, 0, "fail when more than this fraction of requests fail");
ABSL_FLAG(std::string, csv, "", "write one CSV row per level to this file");
ABSL_FLAG(std::string, json, "", "write the whole result as JSON to this file");
ABSL_FLAG(bool, tls, false,
          "connect with TLS (implied by the --tls_* files); the server's certificate must chain "
          "to --tls_ca_file, or to the system's roots without it");
ABSL_FLAG(std::string, tls_ca_file, "", "PEM CA certificate(s) that sign the servers' certificates");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate, for servers that require one (mTLS); with --tls_key_file");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_server_name, "",
          "name to check the servers' certificates against instead of the host in --server");
ABSL_FLAG(std::string, graph_management_token_file, "",
          "file with the token of a server started with --graph_management=token; sent as "
          "'authorization: Bearer <token>' when loading and unloading the graph");
ABSL_FLAG(bool, progress, false, "print a progress line to stderr (default: when it is a TTY)");

namespace convserve {
namespace {

// Exit codes (docs/load-generator.md).
constexpr int kExitSetup = 1;
constexpr int kExitErrorRatio = 2;
constexpr int kExitVerify = 3;

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "convserve-load: %s: %s\n", what.c_str(), status.ToString().c_str());
  return kExitSetup;
}

void Print(const std::string& line) { std::printf("%s\n", line.c_str()); }

// Requests in flight an open loop plans for (shared-memory output slots,
// connections) unless flags say otherwise.
constexpr int kOpenLoopInFlight = 64;

absl::StatusOr<LoadSessionOptions> SessionOptionsFromFlags(const LoadOptions* load) {
  LoadSessionOptions options;
  options.servers = absl::GetFlag(FLAGS_server);
  options.graph_file = absl::GetFlag(FLAGS_graph_file);
  options.graph = absl::GetFlag(FLAGS_graph);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.fill_bias = absl::GetFlag(FLAGS_fill_bias);
  if (!absl::GetFlag(FLAGS_input_shape).empty()) {
    absl::StatusOr<std::vector<int64_t>> shape = ParseShape(absl::GetFlag(FLAGS_input_shape));
    if (!shape.ok()) return shape.status();
    options.input_shape = *shape;
  }
  options.batch = absl::GetFlag(FLAGS_batch);
  absl::StatusOr<LoadWarmup> warmup =
      ParseLoadWarmup(absl::GetFlag(FLAGS_warmup_shapes), &options.warmup_sizes);
  if (!warmup.ok()) return warmup.status();
  options.warmup = *warmup;
  options.input_seed = absl::GetFlag(FLAGS_input_seed);
  options.input_file = absl::GetFlag(FLAGS_input_file);
  absl::StatusOr<SharedMemoryKind> shared_memory =
      ParseSharedMemoryKind(absl::GetFlag(FLAGS_shared_memory));
  if (!shared_memory.ok()) return shared_memory.status();
  options.shared_memory = *shared_memory;
  options.streaming = absl::GetFlag(FLAGS_streaming);
  // Both are KServe features: they choose it unless --protocol says
  // otherwise (LoadSession refuses convserve with them).
  std::string protocol_name = absl::GetFlag(FLAGS_protocol);
  if (protocol_name.empty()) {
    protocol_name =
        options.shared_memory != SharedMemoryKind::kNone || options.streaming ? "kserve"
                                                                                : "convserve";
  }
  absl::StatusOr<Protocol> protocol = ParseProtocol(protocol_name);
  if (!protocol.ok()) return protocol.status();
  options.protocol = *protocol;
  options.cuda_device = absl::GetFlag(FLAGS_cuda_device);
  // The most requests in flight: the largest closed-loop level, 64 in an
  // open loop, 1 without a load mode. The defaults of the next two scale
  // with it.
  int most_in_flight = 1;
  if (load != nullptr && load->mode == LoadMode::kClosedLoop) {
    for (int c : load->concurrency) most_in_flight = std::max(most_in_flight, c);
  } else if (load != nullptr) {
    most_in_flight = kOpenLoopInFlight;
  }
  options.shared_memory_slots = absl::GetFlag(FLAGS_shared_memory_slots);
  if (options.shared_memory_slots < 0) {
    return absl::InvalidArgumentError("--shared_memory_slots must be >= 0");
  }
  if (options.shared_memory_slots == 0) options.shared_memory_slots = most_in_flight;
  options.connections = absl::GetFlag(FLAGS_connections);
  if (options.connections < 0) return absl::InvalidArgumentError("--connections must be >= 0");
  if (options.connections == 0) options.connections = AutoConnections(most_in_flight);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  options.wait_for_server = absl::Seconds(absl::GetFlag(FLAGS_wait_for_server));
  options.verify = absl::GetFlag(FLAGS_verify);
  absl::StatusOr<ClientTlsOptions> tls = ClientTlsFromFiles(
      absl::GetFlag(FLAGS_tls), absl::GetFlag(FLAGS_tls_ca_file), absl::GetFlag(FLAGS_tls_cert_file),
      absl::GetFlag(FLAGS_tls_key_file), absl::GetFlag(FLAGS_tls_server_name));
  if (!tls.ok()) return tls.status();
  options.tls = *std::move(tls);
  if (!absl::GetFlag(FLAGS_graph_management_token_file).empty()) {
    absl::StatusOr<std::string> token =
        ReadTokenFile(absl::GetFlag(FLAGS_graph_management_token_file));
    if (!token.ok()) return token.status();
    options.graph_management_token = *std::move(token);
  }
  return options;
}

absl::StatusOr<LoadOptions> LoadOptionsFromFlags() {
  LoadOptions options;
  const std::string concurrency = absl::GetFlag(FLAGS_concurrency_range);
  const std::string rate = absl::GetFlag(FLAGS_request_rate);
  if (!concurrency.empty() && !rate.empty()) {
    return absl::InvalidArgumentError("give one of --concurrency_range, --request_rate");
  }
  if (!concurrency.empty()) {
    absl::StatusOr<std::vector<int>> levels = ParseIntRange(concurrency, "concurrency_range");
    if (!levels.ok()) return levels.status();
    options.concurrency = *levels;
  } else {
    absl::StatusOr<std::vector<double>> levels = ParseRange(rate, "request_rate");
    if (!levels.ok()) return levels.status();
    options.mode = LoadMode::kOpenLoop;
    options.request_rates = *levels;
  }
  const std::string calls = absl::GetFlag(FLAGS_calls);
  if (calls != "blocking" && calls != "callback") {
    return absl::InvalidArgumentError(
        absl::StrCat("--calls '", calls, "': must be blocking or callback"));
  }
  options.blocking_calls = calls == "blocking";
  absl::StatusOr<Arrival> arrival = ParseArrival(absl::GetFlag(FLAGS_arrival));
  if (!arrival.ok()) return arrival.status();
  options.arrival = *arrival;
  options.arrival_seed = absl::GetFlag(FLAGS_arrival_seed);
  options.measurement.warmup = absl::GetFlag(FLAGS_warmup);
  options.measurement.window = absl::GetFlag(FLAGS_window);
  options.measurement.window_requests = absl::GetFlag(FLAGS_window_requests);
  options.measurement.stability_percent = absl::GetFlag(FLAGS_stability_percent);
  options.measurement.stable_windows = absl::GetFlag(FLAGS_stable_windows);
  options.measurement.max_windows = absl::GetFlag(FLAGS_max_windows);
  options.verify_every = absl::GetFlag(FLAGS_verify_every);
  const bool tty = isatty(STDERR_FILENO) != 0;
  if (tty || absl::GetFlag(FLAGS_progress)) {
    options.progress = [tty](const std::string& line) {
      // On a terminal the line is rewritten in place; in a log, appended.
      std::fprintf(stderr, tty ? "\r\033[K%s" : "%s\n", line.c_str());
      std::fflush(stderr);
    };
  }
  absl::Status valid = ValidateLoadOptions(options);
  if (!valid.ok()) return valid;
  return options;
}

// The first request: its output summary line is part of every run's output
// (tests/integration/python_client_test.py reads it). A failure ends a
// sequential run; a load run counts it and goes on (--max_error_ratio judges).
int Probe(LoadSession& session, bool load_mode, double* latency_ms) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<InferOutput> output = session.Send();
  *latency_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!output.ok()) {
    const char* call = session.protocol() == Protocol::kConvServe ? "Infer"
                       : session.streaming()                       ? "ModelStreamInfer"
                                                                   : "ModelInfer";
    if (!load_mode) return Fail(call, output.status());
    std::fprintf(stderr, "convserve-load: the first %s failed: %s\n", call,
                 output.status().ToString().c_str());
    return 0;
  }
  // The first output is always read, from shared memory too.
  if (absl::Status fetched = output->FetchBytes(); !fetched.ok()) {
    return Fail("reading the first output", fetched);
  }
  const v1::DataType type = session.input().definition.data_type();
  Print("output " + FormatSummary(output->shape, type, Summarize(type, output->bytes)));
  if (!absl::GetFlag(FLAGS_save_output).empty()) {
    absl::Status saved = WriteFileBytes(absl::GetFlag(FLAGS_save_output), output->bytes);
    if (!saved.ok()) return Fail("--save_output", saved);
  }
  session.Verify(&*output);
  return 0;
}

// --requests one after another, as the tool did before it had load modes.
int RunSequential(LoadSession& session, double first_ms) {
  std::vector<double> latencies_ms = {first_ms};
  for (int i = 1; i < absl::GetFlag(FLAGS_requests); ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<InferOutput> output = session.Send();
    if (!output.ok()) return Fail("request " + std::to_string(i + 1), output.status());
    latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    if (i % absl::GetFlag(FLAGS_verify_every) == 0) session.Verify(&*output);
  }
  const LatencySummary l = SummarizeLatencies(latencies_ms);
  std::printf("%zu requests (%s): latency ms min=%.3f p50=%.3f p99=%.3f max=%.3f\n",
              latencies_ms.size(), ProtocolName(session.protocol()), l.min_ms, l.p50_ms, l.p99_ms,
              l.max_ms);
  return 0;
}

int Run() {
  const bool load_mode =
      !absl::GetFlag(FLAGS_concurrency_range).empty() || !absl::GetFlag(FLAGS_request_rate).empty();
  if (!load_mode && (!absl::GetFlag(FLAGS_csv).empty() || !absl::GetFlag(FLAGS_json).empty())) {
    return Fail("usage", absl::InvalidArgumentError(
                             "--csv and --json need --concurrency_range or --request_rate"));
  }
  absl::StatusOr<LoadOptions> load_options;
  if (load_mode) {
    load_options = LoadOptionsFromFlags();
    if (!load_options.ok()) return Fail("usage", load_options.status());
  }
  absl::StatusOr<LoadSessionOptions> session_options =
      SessionOptionsFromFlags(load_mode ? &*load_options : nullptr);
  if (!session_options.ok()) return Fail("usage", session_options.status());
  // Before any thread starts (the session's channels start gRPC's): regions
  // registered on the server are removed on Ctrl-C too.
  if (session_options->shared_memory != SharedMemoryKind::kNone) HandleInterruptsWithCleanups();
  absl::StatusOr<std::unique_ptr<LoadSession>> created =
      LoadSession::Create(*session_options, Print);
  if (!created.ok()) return Fail("setup", created.status());
  LoadSession& session = **created;
  const InferInput& input = session.input();
  if (!absl::GetFlag(FLAGS_save_input).empty()) {
    absl::Status saved = WriteFileBytes(absl::GetFlag(FLAGS_save_input), input.bytes);
    if (!saved.ok()) return Fail("--save_input", saved);
  }
  std::printf("input  [%s] %s %s, %zu bytes\n", absl::StrJoin(input.shape, ", ").c_str(),
              v1::DataType_Name(input.definition.data_type()).c_str(),
              v1::Layout_Name(input.definition.layout()).c_str(), input.bytes.size());
  std::string calls = "calls: blocking, on this thread";
  if (load_mode && load_options->mode == LoadMode::kClosedLoop) {
    calls = load_options->blocking_calls
                ? "calls: blocking, one thread per request in flight (--calls=blocking)"
                : "calls: gRPC callback API (--calls=callback)";
  } else if (load_mode) {
    calls = "calls: gRPC callback API (open loop)";
  }
  Print("transport: " + session.transport() + "; " + calls);

  double first_ms = 0;
  if (int failed = Probe(session, load_mode, &first_ms); failed != 0) return failed;
  int exit_code = 0;
  if (!load_mode) {
    exit_code = RunSequential(session, first_ms);
  } else {
    absl::StatusOr<RunResult> result = RunLoad(session, *load_options);
    // Clears the progress line on a terminal.
    if (load_options->progress && isatty(STDERR_FILENO)) std::fputs("\r\033[K", stderr);
    if (!result.ok()) return Fail("load", result.status());
    std::printf("\n%s", FormatReport(*result).c_str());
    for (const auto& [path, text] :
         {std::make_pair(absl::GetFlag(FLAGS_csv), ReportCsv(*result)),
          std::make_pair(absl::GetFlag(FLAGS_json), ReportJson(*result))}) {
      if (path.empty()) continue;
      absl::Status written = WriteFileBytes(path, text);
      if (!written.ok()) return Fail("writing " + path, written);
    }
    const double ratio = ErrorRatio(result->totals);
    if (ratio > absl::GetFlag(FLAGS_max_error_ratio)) {
      std::fprintf(stderr, "convserve-load: error ratio %.4g exceeds --max_error_ratio=%g\n", ratio,
                   absl::GetFlag(FLAGS_max_error_ratio));
      exit_code = kExitErrorRatio;
    }
  }
  if (session.verifier() != nullptr) {
    const VerifyResult v = session.verifier()->result();
    if (!load_mode) {
      std::printf("verify: %lld outputs checked, %lld mismatches, max relative L2 %.3g\n",
                  static_cast<long long>(v.checked), static_cast<long long>(v.mismatches),
                  v.max_rel_l2);
    }
    if (v.mismatches > 0) {
      std::fprintf(stderr, "convserve-load: verification FAILED: %s\n", v.first_problem.c_str());
      exit_code = kExitVerify;
    }
  }
  if (absl::GetFlag(FLAGS_unload)) {
    absl::Status unloaded = session.Unload();
    if (!unloaded.ok()) return Fail("UnloadGraph", unloaded);
    std::printf("unloaded '%s'\n", input.graph.c_str());
  }
  return exit_code;
}

}  // namespace
}  // namespace convserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "convserve-load: load a graph and send inference requests, or measure a server.\n"
      "  convserve-load --server=localhost:8001 "
      "--graph_file=deploy/examples/resnet_block.textproto --input_shape=1,3,64,64 "
      "--concurrency_range=1:8:x2");
  // --help lists the flags of the file that defines them; absl's default
  // looks for a file named after the binary (convserve-x.cc) and finds none.
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "client/load_main.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::ParseCommandLine(argc, argv);
  // No lock-order graph on every Mutex acquisition (as in the server).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  convserve::KeepFreedBlocksForReuse();  // before any thread starts (malloc_tuning.h)
  // Line by line into a pipe or log too: a reader sees the setup as it
  // happens, and an interrupted run (which ends in _exit) loses no line.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return convserve::Run();
}
