// convserve-server: serves convserve.v1 and KServe v2 over gRPC until SIGTERM
// or SIGINT, then drains accepted requests and exits 0; when no GPU can serve
// any more (each lost its CUDA context) it drains and exits 3.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/runtime/malloc_tuning.h"
#include "engine/runtime/warmup_shapes.h"
#include "server/backend_factory.h"
#include "server/grpc_server.h"
#include "server/inference_core.h"
#include "server/version.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:8001",
          "gRPC listen address: host:port or unix:PATH; several, comma-separated, serve the "
          "same calls (e.g. 0.0.0.0:8001,unix:/run/convserve/grpc.sock)");
ABSL_FLAG(std::string, backend, "auto",
          "inference backend: auto (GPU when present, else CPU), cpu or cuda");
ABSL_FLAG(int, max_message_bytes, 256 << 20, "largest gRPC request or response, in bytes");
ABSL_FLAG(int, grpc_threads, 4,
          "gRPC threads that run every call's events on the completion queues "
          "(docs/runtime.md, \"gRPC's threads\")");
ABSL_FLAG(int, grpc_queues, 1,
          "gRPC completion queues the --grpc_threads share (1 to --grpc_threads); on one "
          "queue the thread that reads a request also runs it");
ABSL_FLAG(int, cpu_threads, 0, "threads of the CPU backend; 0 = one per hardware thread");
ABSL_FLAG(std::vector<std::string>, gpus, {},
          "CUDA devices to serve on, e.g. 0,1; empty means every visible GPU");
ABSL_FLAG(int, workers_per_gpu, 2,
          "worker threads per GPU, each with its own cuDNN handle, stream and buffers");
ABSL_FLAG(int, worker_spin_us, 500,
          "GPU backend: microseconds one worker per GPU keeps polling for the next request "
          "before it sleeps (saves a thread wake-up per request under steady traffic; costs a "
          "busy core per GPU while requests keep coming); 0: sleep at once");
ABSL_FLAG(bool, launch_ahead, true,
          "GPU backend: a worker launches the next waiting request of the same graph and "
          "shape, when it needs no staging copy (tensors in CUDA or registered system shared "
          "memory, or in the messages) and its layers go on the stream at once (about 2 ms of "
          "work or less), before it waits for the last one (docs/runtime.md, \"Launching "
          "ahead\")");
ABSL_FLAG(int, completion_threads, 0,
          "GPU backend: threads that answer requests (the response, metrics and gRPC's write) "
          "while a worker takes its next request or batch; 0: one per worker");
ABSL_FLAG(std::string, engine_selection, "autotune",
          "cuDNN engine choice: autotune (time the top candidates of both paths once per "
          "shape, keep the fastest), heuristic (cuDNN mode A, fastest to build), "
          "heuristic_b or fallback");
ABSL_FLAG(bool, deterministic, false, "use only deterministic cuDNN engines");
ABSL_FLAG(bool, direct_kernels, true,
          "autotune also races convserve's own kernels (today: depthwise convolutions) "
          "against cuDNN's engines; heuristic policies use them only where no cuDNN engine "
          "runs a layer");
ABSL_FLAG(bool, dependent_launch, true,
          "GPUs of compute capability 9.0+: launch convserve's own kernels as programmatic "
          "dependent launches, so each is scheduled while the kernel before it finishes (it "
          "still waits for that kernel's results); false: plain launches");
ABSL_FLAG(bool, programmatic_entry, true,
          "with --dependent_launch: enter each cuDNN plan whose first kernel was seen to wait "
          "for the kernel before it by a programmatic edge in captured graphs, so it is "
          "launched while that kernel finishes (each plan is tested once, when built)");
ABSL_FLAG(bool, strict_float32, false,
          "float32 graphs: no TF32 tensor-core or down-converting engines (slower, exact)");
ABSL_FLAG(int64_t, max_workspace_bytes, int64_t{256} << 20, "largest cuDNN workspace per layer");
ABSL_FLAG(std::string, engine_blocklist, "",
          "file of cuDNN engine global indices never to use, one per line ('#' comments)");
ABSL_FLAG(int, autotune_candidates, 12, "autotune: candidate engines timed per layer and path");
ABSL_FLAG(int, autotune_knob_candidates, 16,
          "autotune: settings of the winning engine one knob away from its own, timed per "
          "layer after the heuristics' candidates (0: off)");
ABSL_FLAG(bool, engine_prober, true,
          "run cuDNN engine searches in a convserve-prober process per GPU, so a candidate that "
          "faults kills the prober (and is quarantined), not the server; false runs them in the "
          "server, where such a fault loses the GPU");
ABSL_FLAG(std::string, prober_binary, "",
          "the engine prober executable; empty: convserve-prober next to this binary");
ABSL_FLAG(double, prober_candidate_timeout_seconds, 120,
          "an engine candidate that runs longer than this in the prober counts as hung and is "
          "quarantined");
ABSL_FLAG(std::string, plan_cache_dir, "auto",
          "directory of the plan store (quarantined engine candidates), shared across restarts "
          "and by processes on one volume; auto: $XDG_CACHE_HOME/convserve or "
          "$HOME/.cache/convserve; empty: a private temporary directory (nothing persists)");
ABSL_FLAG(std::string, cudnn_errata, "",
          "file of extra cuDNN errata rules (engine configurations never to run), in the format "
          "of engine/cudnn/cudnn_errata.txt, which is built in");
ABSL_FLAG(double, gpu_failure_exit_delay_seconds, 0,
          "after a lost CUDA context: how long to keep answering (health NOT_SERVING, requests "
          "UNAVAILABLE, /metrics) before draining and exiting with status 3");
ABSL_FLAG(bool, fuse_pointwise_pairs, true,
          "GPU: race each pair of consecutive 1x1 layers (stride 1, no padding or groups, 32 or "
          "64 channels in and out, float16/bfloat16 NHWC) run as one kernel of ours against their "
          "two cuDNN plans, once per pair and GPU model, and run the faster; false runs every "
          "layer on its own plan");
ABSL_FLAG(bool, cuda_graphs, true,
          "GPU: capture each request's layer launches into CUDA graphs (per graph, input shape, "
          "worker and in-place pointers, the second time they run) and replay them; false runs "
          "every layer as plain launches");
ABSL_FLAG(std::string, testing_fault_graph, "",
          "testing only: requests for the graph of this name make a misaligned write on the "
          "GPU, losing its CUDA context");
ABSL_FLAG(int, testing_fault_candidate_rank, -1,
          "testing only: the engine candidate at this rank faults the prober's CUDA context");
ABSL_FLAG(int, request_threads, 2, "CPU backend: workers that run requests concurrently");
ABSL_FLAG(int, max_queued_requests, 256,
          "requests waiting for a worker (per GPU on the GPU backend) before new ones get "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_batch_size, 0,
          "dynamic batching of graphs whose LoadGraph does not set it: requests of a graph with "
          "the same C and spatial dims are joined along N into one execution of at most this N; "
          "0 = off (docs/runtime.md, \"Dynamic batching\")");
ABSL_FLAG(int64_t, max_queue_delay_microseconds, 0,
          "dynamic batching: how long the oldest waiting request may be held for batch-mates "
          "when no preferred size can be formed; 0 joins only requests already waiting, "
          "costing no latency at low load");
ABSL_FLAG(bool, batch_dispatch_when_idle, true,
          "dynamic batching: when none of a graph's batches is running, what waits is sent at "
          "once, so requests wait for batch-mates only while the GPU is busy with the graph; "
          "false: Triton's rule (the delay is waited out even with the GPU idle)");
ABSL_FLAG(std::vector<std::string>, preferred_batch_sizes, {},
          "dynamic batching: batch sizes to cut at when reachable, e.g. 8,16; empty = as large "
          "as possible");
ABSL_FLAG(std::string, warmup_shapes, "",
          "warm-up at load for graphs whose LoadGraph names no warm-up shapes: N:HxW entries "
          "(N:DxHxW for 3-D graphs; C is the graph's), e.g. 1:56x56,8:56x56; plans for them (and "
          "the batches dynamic batching forms from them) are built on every GPU before the "
          "graph is ready; empty: no warm-up (docs/runtime.md, \"Warm-up at load\")");
ABSL_FLAG(int, max_graphs, 64, "graphs loaded at once");
ABSL_FLAG(int64_t, max_parameter_bytes, int64_t{4} << 30,
          "weight and bias bytes of all loaded graphs together");
ABSL_FLAG(int64_t, max_tensor_bytes, int64_t{1} << 30,
          "largest input, intermediate or output tensor, in bytes");
ABSL_FLAG(int, max_layers, 256, "layers per graph");
ABSL_FLAG(int, max_shared_memory_regions, 64,
          "KServe shared-memory regions (system and CUDA) registered at once");
ABSL_FLAG(int64_t, max_shared_memory_bytes, int64_t{64} << 30,
          "bytes of all registered KServe shared-memory regions together");
ABSL_FLAG(double, shutdown_grace_seconds, 30,
          "on SIGTERM, how long open calls may take after accepted work is done");
ABSL_FLAG(std::string, max_request_flops, "auto",
          "floating-point operations one request may cost, from its shapes (2*N*K*C/groups*R*S*P*Q "
          "per conv layer, plus bias and activation); a costlier request is INVALID_ARGUMENT. "
          "auto: 1e14 on GPUs, 1e11 on the CPU backend; 0: no limit; or a number such as 5e12");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate (chain) of the gRPC port; set with --tls_key_file to serve TLS only "
          "(plain-text clients are refused); empty serves plain text");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file (unencrypted)");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA certificate(s) that sign client certificates; a client certificate sent must "
          "verify against them (mTLS with --tls_require_client_cert)");
ABSL_FLAG(bool, tls_require_client_cert, false,
          "mutual TLS: refuse clients without a certificate signed by --tls_client_ca_file");
ABSL_FLAG(int, tls_reload_interval_seconds, 60,
          "how often the TLS files are checked for changes; new connections use changed "
          "certificates, keys and CAs without a restart");
ABSL_FLAG(std::string, graph_management, "auto",
          "who may call LoadGraph, UnloadGraph, RepositoryModelLoad and RepositoryModelUnload: "
          "open (any client), token (clients sending 'authorization: Bearer <token>' with the "
          "token of --graph_management_token_file), off (nobody; graphs come from --graph_dir). "
          "auto: token when --graph_management_token_file is set, else off when --graph_dir is "
          "set, else open");
ABSL_FLAG(std::string, graph_management_token_file, "",
          "file holding the graph management token (surrounding whitespace ignored); re-read on "
          "SIGHUP");
ABSL_FLAG(std::string, graph_dir, "",
          "directory of graph files (NAME.pb, NAME.binpb, NAME.textproto, NAME.txtpb or "
          "NAME.json: a convserve.v1.GraphDef with its weights) loaded before the port opens; "
          "a graph that fails to load stops the start; KServe RepositoryModelLoad can load them "
          "again by NAME");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:8002",
          "Prometheus /metrics address (host:port); empty serves no metrics");
ABSL_FLAG(int, max_metric_graphs, 32,
          "graphs that get their own metric label; later ones share graph=\"_other\"");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error or off");

namespace convserve {
namespace {

// Exit status when the process stops because no GPU can serve (docs/deploy.md).
constexpr int kExitNoHealthyGpu = 3;

// --max_request_flops=auto: about a second of work or less on one GPU of
// the sm_80/sm_90 class in float16, and on a many-core CPU for the CPU
// backend (docs/security.md has the figures).
constexpr double kAutoMaxRequestFlopsGpu = 1e14;
constexpr double kAutoMaxRequestFlopsCpu = 1e11;

absl::StatusOr<double> MaxRequestFlops(const std::string& text, bool gpu) {
  if (text == "auto") return gpu ? kAutoMaxRequestFlopsGpu : kAutoMaxRequestFlopsCpu;
  double flops = 0;
  if (!absl::SimpleAtod(text, &flops) || !(flops >= 0) || std::isinf(flops)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_request_flops '", text, "' is not auto, 0 (no limit) or a positive number"));
  }
  return flops;
}

absl::StatusOr<GraphManagementOptions> GraphManagementFromFlags() {
  GraphManagementOptions options;
  options.token_file = absl::GetFlag(FLAGS_graph_management_token_file);
  std::string mode = absl::GetFlag(FLAGS_graph_management);
  if (mode == "auto") {
    mode = !options.token_file.empty()                ? "token"
           : !absl::GetFlag(FLAGS_graph_dir).empty() ? "off"
                                                       : "open";
  }
  absl::StatusOr<GraphManagementMode> parsed = ParseGraphManagementMode(mode);
  if (!parsed.ok()) return parsed.status();
  options.mode = *parsed;
  if (options.mode != GraphManagementMode::kToken && !options.token_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--graph_management_token_file is set but --graph_management is ", mode,
        "; use --graph_management=token (or auto)"));
  }
  return options;
}

int Run() {
  const std::string log_level = absl::GetFlag(FLAGS_log_level);
  const spdlog::level::level_enum level = spdlog::level::from_str(log_level);
  // spdlog reads any unknown name as "off"; a typo must not silence the server.
  if (level == spdlog::level::off && log_level != "off") {
    spdlog::critical("cannot start: --log_level '{}' is not trace, debug, info, warn, error or off",
                     log_level);
    return 2;
  }
  spdlog::set_level(level);
  spdlog::info("{}", KeepFreedBlocksForReuse());  // before any thread starts
  // Block the stop signals before any thread starts so only sigwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  // Raised by the server itself when no GPU serves any more.
  sigaddset(&stop_signals, SIGUSR1);
  // Reload (the graph management token), not stop.
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  BackendConfig backend_config;
  backend_config.name = absl::GetFlag(FLAGS_backend);
  backend_config.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  for (const std::string& gpu : absl::GetFlag(FLAGS_gpus)) {
    int ordinal = 0;
    if (!absl::SimpleAtoi(gpu, &ordinal) || ordinal < 0) {
      spdlog::critical("cannot start: --gpus entry '{}' is not a device number", gpu);
      return 2;
    }
    backend_config.gpus.push_back(ordinal);
  }
  backend_config.workers_per_gpu = absl::GetFlag(FLAGS_workers_per_gpu);
  if (absl::GetFlag(FLAGS_worker_spin_us) < 0) {
    spdlog::critical("--worker_spin_us must be >= 0");
    return 2;
  }
  backend_config.worker_spin = absl::Microseconds(absl::GetFlag(FLAGS_worker_spin_us));
  backend_config.launch_ahead = absl::GetFlag(FLAGS_launch_ahead);
  if (absl::GetFlag(FLAGS_completion_threads) < 0) {
    spdlog::critical("--completion_threads must be >= 0");
    return 2;
  }
  backend_config.completion_threads = absl::GetFlag(FLAGS_completion_threads);
  backend_config.executor.threads = absl::GetFlag(FLAGS_request_threads);
  backend_config.executor.max_queued = absl::GetFlag(FLAGS_max_queued_requests);
  backend_config.engine_selection = absl::GetFlag(FLAGS_engine_selection);
  backend_config.deterministic = absl::GetFlag(FLAGS_deterministic);
  backend_config.strict_float32 = absl::GetFlag(FLAGS_strict_float32);
  backend_config.direct_kernels = absl::GetFlag(FLAGS_direct_kernels);
  backend_config.dependent_launch = absl::GetFlag(FLAGS_dependent_launch);
  backend_config.programmatic_entry = absl::GetFlag(FLAGS_programmatic_entry);
  backend_config.max_workspace_bytes = absl::GetFlag(FLAGS_max_workspace_bytes);
  backend_config.engine_blocklist = absl::GetFlag(FLAGS_engine_blocklist);
  backend_config.autotune_candidates = absl::GetFlag(FLAGS_autotune_candidates);
  backend_config.autotune_knob_candidates = absl::GetFlag(FLAGS_autotune_knob_candidates);
  backend_config.cudnn_errata = absl::GetFlag(FLAGS_cudnn_errata);
  backend_config.engine_prober = absl::GetFlag(FLAGS_engine_prober);
  backend_config.prober_binary = absl::GetFlag(FLAGS_prober_binary);
  backend_config.plan_cache_dir = absl::GetFlag(FLAGS_plan_cache_dir);
  backend_config.prober_candidate_timeout_seconds =
      absl::GetFlag(FLAGS_prober_candidate_timeout_seconds);
  backend_config.log_level = log_level;
  backend_config.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  backend_config.fuse_pointwise_pairs = absl::GetFlag(FLAGS_fuse_pointwise_pairs);
  backend_config.testing_fault_graph = absl::GetFlag(FLAGS_testing_fault_graph);
  backend_config.testing_fault_candidate_rank = absl::GetFlag(FLAGS_testing_fault_candidate_rank);
  absl::StatusOr<RunnerChoice> choice = MakeRunner(backend_config);
  if (!choice.ok()) {
    spdlog::critical("cannot start: {}", choice.status().ToString());
    return 2;
  }
  spdlog::info("convserve {} starting; {}; {}", kConvServeVersion, choice->reason,
               choice->runner->Describe());

  InferenceCoreOptions options;
  options.graph_limits.max_tensor_bytes = absl::GetFlag(FLAGS_max_tensor_bytes);
  options.graph_limits.max_layers = absl::GetFlag(FLAGS_max_layers);
  options.registry.max_graphs = absl::GetFlag(FLAGS_max_graphs);
  options.registry.max_parameter_bytes = absl::GetFlag(FLAGS_max_parameter_bytes);
  options.graph_limits.max_parameter_bytes = options.registry.max_parameter_bytes;
  options.default_batching.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  options.default_batching.max_queue_delay =
      absl::Microseconds(absl::GetFlag(FLAGS_max_queue_delay_microseconds));
  for (const std::string& size : absl::GetFlag(FLAGS_preferred_batch_sizes)) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(size, &value)) {
      spdlog::critical("cannot start: --preferred_batch_sizes entry '{}' is not a number", size);
      return 2;
    }
    options.default_batching.preferred_batch_sizes.push_back(value);
  }
  options.default_batching.max_queued = absl::GetFlag(FLAGS_max_queued_requests);
  options.default_batching.dispatch_when_idle = absl::GetFlag(FLAGS_batch_dispatch_when_idle);
  if (absl::Status valid = ValidateDynamicBatching(options.default_batching); !valid.ok()) {
    spdlog::critical("cannot start: --max_batch_size, --max_queue_delay_microseconds, "
                     "--preferred_batch_sizes: {}",
                     std::string(valid.message()));
    return 2;
  }
  absl::StatusOr<std::vector<WarmupSize>> warmup = ParseWarmupSizes(absl::GetFlag(FLAGS_warmup_shapes));
  if (!warmup.ok()) {
    spdlog::critical("cannot start: --warmup_shapes: {}", std::string(warmup.status().message()));
    return 2;
  }
  options.default_warmup = *std::move(warmup);
  absl::StatusOr<double> max_request_flops =
      MaxRequestFlops(absl::GetFlag(FLAGS_max_request_flops), choice->gpu);
  if (!max_request_flops.ok()) {
    spdlog::critical("cannot start: {}", max_request_flops.status().ToString());
    return 2;
  }
  options.max_request_flops = *max_request_flops;
  absl::StatusOr<std::unique_ptr<InferenceCore>> core =
      InferenceCore::Create(options, std::move(choice->runner));
  if (!core.ok()) {
    spdlog::critical("cannot start: {}", core.status().ToString());
    return 2;
  }

  GrpcServerOptions server_options;
  server_options.listen_address = absl::GetFlag(FLAGS_listen);
  server_options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  server_options.grpc_threads = absl::GetFlag(FLAGS_grpc_threads);
  server_options.grpc_queues = absl::GetFlag(FLAGS_grpc_queues);
  server_options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  server_options.tls.key_file = absl::GetFlag(FLAGS_tls_key_file);
  server_options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  server_options.tls.require_client_cert = absl::GetFlag(FLAGS_tls_require_client_cert);
  server_options.tls.reload_interval_seconds = absl::GetFlag(FLAGS_tls_reload_interval_seconds);
  absl::StatusOr<GraphManagementOptions> management = GraphManagementFromFlags();
  if (!management.ok()) {
    spdlog::critical("cannot start: {}", management.status().ToString());
    return 2;
  }
  server_options.graph_management = *management;
  server_options.graph_dir = absl::GetFlag(FLAGS_graph_dir);
  server_options.metrics.listen_address = absl::GetFlag(FLAGS_metrics_listen);
  server_options.metrics.max_graph_labels = absl::GetFlag(FLAGS_max_metric_graphs);
  server_options.on_no_healthy_device = [] { kill(getpid(), SIGUSR1); };
  server_options.shared_memory.max_regions = absl::GetFlag(FLAGS_max_shared_memory_regions);
  server_options.shared_memory.max_bytes = absl::GetFlag(FLAGS_max_shared_memory_bytes);
  absl::StatusOr<std::unique_ptr<GrpcServer>> server =
      GrpcServer::Start(server_options, core->get());
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    return 2;
  }
  spdlog::info("listening on {} ({}): convserve.v1.ConvServe, "
               "inference.GRPCInferenceService, grpc.health.v1, reflection; graph management {}; "
               "metrics {}",
               (*server)->addresses(),
               !TlsEnabled(server_options.tls)             ? "plain text"
               : server_options.tls.require_client_cert ? "mutual TLS"
                                                         : "TLS",
               GraphManagementModeName(server_options.graph_management.mode),
               (*server)->metrics().port() > 0
                   ? absl::StrCat("on port ", (*server)->metrics().port(), " /metrics")
                   : std::string("off"));

  int signal_number = 0;
  for (sigwait(&stop_signals, &signal_number); signal_number == SIGHUP;
       sigwait(&stop_signals, &signal_number)) {
    const absl::Status reloaded = (*server)->Reload();
    if (reloaded.ok()) {
      spdlog::info("SIGHUP: graph management token re-read (TLS files are re-read every {} s)",
                   server_options.tls.reload_interval_seconds);
    } else {
      spdlog::error("SIGHUP: {}; the previous token stays in force", reloaded.ToString());
    }
  }
  const bool gpu_lost = signal_number == SIGUSR1;
  if (gpu_lost) {
    const double delay = absl::GetFlag(FLAGS_gpu_failure_exit_delay_seconds);
    spdlog::critical("no GPU serves any more; draining{} and exiting with status {} so the "
                     "process is restarted",
                     delay > 0 ? absl::StrCat(" in ", delay, " s") : "", kExitNoHealthyGpu);
    if (delay > 0) absl::SleepFor(absl::Seconds(delay));
  } else {
    spdlog::info("received {}; draining accepted requests", strsignal(signal_number));
  }
  (*server)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds)));
  spdlog::info("stopped: {} requests accepted, {} answered", (*core)->accepted(),
               (*core)->answered());
  // A GPU may also have been lost during a SIGTERM drain.
  return gpu_lost || !(*core)->runner().healthy() ? kExitNoHealthyGpu : 0;
}

}  // namespace
}  // namespace convserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "convserve-server: gRPC inference for conv -> bias -> activation graphs.\n"
      "  convserve-server --listen=0.0.0.0:8001 --backend=auto");
  // --help lists the flags of the file that defines them; absl's default
  // looks for a file named after the binary (convserve-x.cc) and finds none.
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built without NDEBUG, so every Mutex acquisition
  // would also update one global lock-order graph (docs/runtime.md,
  // "Request path"); unit tests keep the check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return convserve::Run();
}
