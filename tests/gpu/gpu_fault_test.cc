// Fault containment through a real convserve-server binary on a GPU, with the
// server's test hooks:
// - a request that makes its GPU lose the CUDA context (--testing_fault_graph)
//   on the only GPU: health turns NOT_SERVING within 1 s, the fault is
//   counted, every accepted request is answered, the process exits 3;
// - with two GPUs, a lost context on one ends service on both (CUDA fails all
//   further work of the process after a sticky error), health NOT_SERVING,
//   exit 3;
// - an engine candidate that faults the prober (--testing_fault_candidate_rank)
//   is quarantined, the request still succeeds, and after a restart on the
//   same plan cache directory the candidate is never run again.
// Skips without a GPU.
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "engine/cudnn/cudnn_backend.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/observability/child_process.h"
#include "tests/observability/http_get.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/traffic.h"

namespace convserve {
namespace {

std::string ServerBinary() {
  const char* binary = std::getenv("CONVSERVE_SERVER_BINARY");
  return binary != nullptr ? binary : CONVSERVE_SERVER_BINARY;
}

// One float16 NHWC layer: 3x3, 16 -> 16 channels, bias, ReLU.
v1::GraphDef SmallGraph(const std::string& name) {
  v1::GraphDef graph;
  graph.set_name(name);
  graph.set_data_type(v1::FLOAT16);
  graph.set_layout(v1::NHWC);
  graph.set_input_channels(16);
  v1::ConvLayer* layer = graph.add_layers();
  layer->set_out_channels(16);
  for (int d = 0; d < 2; ++d) {
    layer->add_kernel_size(3);
    layer->add_pad_before(1);
    layer->add_pad_after(1);
  }
  layer->mutable_activation()->set_kind(v1::Activation::RELU);
  EXPECT_TRUE(FillParameters(11, /*with_bias=*/true, &graph).ok());
  return graph;
}

// A server child process with its ports and log.
class ServerProcess {
 public:
  static std::unique_ptr<ServerProcess> Start(const std::string& dir, const std::string& log_name,
                                              std::vector<std::string> flags) {
    auto server = std::unique_ptr<ServerProcess>(new ServerProcess());
    absl::StatusOr<int> port = PickFreePort();
    absl::StatusOr<int> metrics_port = PickFreePort();
    EXPECT_TRUE(port.ok() && metrics_port.ok());
    if (!port.ok() || !metrics_port.ok()) return nullptr;
    server->address_ = absl::StrCat("127.0.0.1:", *port);
    server->metrics_port_ = *metrics_port;
    ChildOptions options;
    options.argv = {ServerBinary(), "--listen=" + server->address_,
                    absl::StrCat("--metrics_listen=127.0.0.1:", *metrics_port), "--backend=cuda"};
    for (std::string& flag : flags) options.argv.push_back(std::move(flag));
    options.output_path = dir + "/" + log_name;
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(options);
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return nullptr;
    server->child_ = *std::move(child);
    server->health_ = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(server->address_, grpc::InsecureChannelCredentials()));
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (server->Health() != "SERVING") {
      if (absl::Now() > deadline || server->child_->Poll().has_value()) {
        ADD_FAILURE() << "the server did not start:\n" << server->child_->Output();
        return nullptr;
      }
      absl::SleepFor(absl::Milliseconds(20));  // bounded wait for start-up
    }
    return server;
  }

  // "SERVING", "NOT_SERVING", or the RPC error.
  std::string Health() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status = health_->Check(&context, request, &response);
    if (!status.ok()) return absl::StrCat("rpc error ", status.error_code());
    return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  }

  // The value of the first /metrics line that starts with `series`.
  absl::StatusOr<double> Metric(const std::string& series) {
    absl::StatusOr<HttpResponse> page = HttpGet(metrics_port_, "/metrics");
    if (!page.ok()) return page.status();
    for (absl::string_view line : absl::StrSplit(page->body, '\n')) {
      if (!absl::StartsWith(line, series)) continue;
      double value = 0;
      if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) return value;
    }
    return absl::NotFoundError(absl::StrCat(series, " is not on the page"));
  }

  ConvServeClient Client() const {
    ClientOptions options;
    options.address = address_;
    options.timeout = std::chrono::seconds(120);
    return ConvServeClient(options);
  }
  ChildProcess& child() { return *child_; }

 private:
  std::string address_;
  int metrics_port_ = 0;
  std::unique_ptr<ChildProcess> child_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

// A server on `gpus` with the fault hook for graph "faulty", and the graphs
// "good" and "faulty" (the same definition) loaded.
std::unique_ptr<ServerProcess> StartWithFaultyGraph(const std::string& dir,
                                                    const std::string& gpus) {
  std::unique_ptr<ServerProcess> server = ServerProcess::Start(
      dir, "server.log",
      {"--gpus=" + gpus, "--testing_fault_graph=faulty", "--gpu_failure_exit_delay_seconds=3",
       "--engine_selection=heuristic", "--plan_cache_dir=" + dir + "/store"});
  if (server == nullptr) return nullptr;
  ConvServeClient client = server->Client();
  if (!client.LoadGraph(SmallGraph("good")).ok() || !client.LoadGraph(SmallGraph("faulty")).ok()) {
    ADD_FAILURE() << "loading the graphs failed";
    return nullptr;
  }
  return server;
}

TEST(GpuFaultTest, LostLastGpuTurnsHealthNotServingAnswersAcceptedRequestsAndExits3) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  absl::StatusOr<ScopedTempDir> dir = ScopedTempDir::Create("gpu_fault");
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<ServerProcess> server = StartWithFaultyGraph(dir->path(), "0");
  ASSERT_NE(server, nullptr);
  ConvServeClient client = server->Client();
  const v1::GraphDef good = SmallGraph("good");
  const TrafficRequest warm = MakeTrafficRequest(good, {4, 16, 64, 64}, 5, 1e-2);
  absl::StatusOr<v1::InferResponse> first = client.Infer(warm.request);
  ASSERT_TRUE(first.ok()) << first.status();
  const double error = RelativeL2Error(DecodeToDouble(DType::kFloat16, first->output().data()),
                                       DecodeToDouble(DType::kFloat16, warm.expected));
  EXPECT_LE(error, 1e-2);

  // Requests in flight and queued when the GPU is lost: each must be answered.
  constexpr int kInFlight = 24;
  std::vector<grpc::ClientContext> contexts(kInFlight);
  std::vector<v1::InferResponse> responses(kInFlight);
  std::vector<grpc::Status> statuses(kInFlight);
  std::atomic<int> answered{0};
  absl::Notification all_answered;
  for (int i = 0; i < kInFlight; ++i) {
    contexts[i].set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    client.InferAsync(&contexts[i], &warm.request, &responses[i], [&, i](grpc::Status status) {
      statuses[i] = std::move(status);
      if (++answered == kInFlight) all_answered.Notify();
    });
  }
  v1::InferRequest faulty = warm.request;
  faulty.set_graph("faulty");
  absl::StatusOr<v1::InferResponse> faulted = client.Infer(faulty);
  const absl::Time fault_answered = absl::Now();
  ASSERT_FALSE(faulted.ok());
  EXPECT_TRUE(absl::IsUnavailable(faulted.status())) << faulted.status();
  EXPECT_TRUE(absl::StrContains(faulted.status().message(), "GPU 0 failed"))
      << faulted.status();

  // Health turns NOT_SERVING within 1 s.
  std::string health = server->Health();
  while (health != "NOT_SERVING" && absl::Now() - fault_answered < absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(5));
    health = server->Health();
  }
  const absl::Duration to_not_serving = absl::Now() - fault_answered;
  EXPECT_EQ(health, "NOT_SERVING");
  EXPECT_LE(to_not_serving, absl::Seconds(1));

  // Every accepted request was answered: OK with the right output, or
  // UNAVAILABLE.
  ASSERT_TRUE(all_answered.WaitForNotificationWithTimeout(absl::Seconds(60)));
  int ok = 0, unavailable = 0;
  for (int i = 0; i < kInFlight; ++i) {
    if (statuses[i].ok()) {
      ++ok;
      EXPECT_LE(RelativeL2Error(DecodeToDouble(DType::kFloat16, responses[i].output().data()),
                                DecodeToDouble(DType::kFloat16, warm.expected)),
                1e-2);
    } else {
      EXPECT_EQ(statuses[i].error_code(), grpc::StatusCode::UNAVAILABLE)
          << statuses[i].error_message();
      ++unavailable;
    }
  }
  absl::StatusOr<double> faults = server->Metric("convserve_gpu_faults_total{gpu=\"0\"");
  absl::StatusOr<double> healthy = server->Metric("convserve_gpu_healthy{gpu=\"0\"");
  ASSERT_TRUE(faults.ok()) << faults.status();
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EXPECT_EQ(*faults, 1);
  EXPECT_EQ(*healthy, 0);
  absl::StatusOr<v1::InferResponse> after = client.Infer(warm.request);
  EXPECT_TRUE(absl::IsUnavailable(after.status())) << after.status();

  absl::StatusOr<int> exit_code = server->child().Wait(absl::Seconds(60));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 3);
  const std::string log = server->child().Output();
  EXPECT_TRUE(absl::StrContains(log, "lost its CUDA context")) << log;
  EXPECT_TRUE(absl::StrContains(log, "cudaErrorMisalignedAddress")) << log;
  std::printf("fault: health NOT_SERVING %.0f ms after the faulting request was answered; "
              "%d in-flight requests answered OK, %d UNAVAILABLE; gpu_faults_total %.0f, "
              "gpu_healthy %.0f; exit code %d\n",
              absl::ToDoubleMilliseconds(to_not_serving), ok, unavailable, *faults, *healthy,
              *exit_code);
}

TEST(GpuFaultTest, LostContextOnOneGpuEndsServiceOnEveryGpuOfTheProcess) {
  if (CudaDeviceCount() < 2) GTEST_SKIP() << "needs two GPUs, " << CudaDeviceCount() << " visible";
  absl::StatusOr<ScopedTempDir> dir = ScopedTempDir::Create("gpu_fault_two");
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<ServerProcess> server = StartWithFaultyGraph(dir->path(), "0,1");
  ASSERT_NE(server, nullptr);
  ConvServeClient client = server->Client();
  const v1::GraphDef good = SmallGraph("good");
  const TrafficRequest request = MakeTrafficRequest(good, {2, 16, 32, 32}, 6, 1e-2);
  // Both GPUs serve before the fault.
  std::vector<grpc::ClientContext> contexts(8);
  std::vector<v1::InferResponse> responses(8);
  std::atomic<int> ok{0}, answered{0};
  absl::Notification all_answered;
  for (int i = 0; i < 8; ++i) {
    contexts[i].set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    client.InferAsync(&contexts[i], &request.request, &responses[i], [&](grpc::Status status) {
      ok += status.ok();
      if (++answered == 8) all_answered.Notify();
    });
  }
  ASSERT_TRUE(all_answered.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(ok.load(), 8);

  v1::InferRequest faulty = request.request;
  faulty.set_graph("faulty");
  absl::StatusOr<v1::InferResponse> fault = client.Infer(faulty);
  const absl::Time answered_at = absl::Now();
  EXPECT_TRUE(absl::IsUnavailable(fault.status())) << fault.status();
  while (server->Health() != "NOT_SERVING" && absl::Now() - answered_at < absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(server->Health(), "NOT_SERVING");
  EXPECT_LE(absl::Now() - answered_at, absl::Seconds(1));
  // One GPU faulted; neither serves (CUDA ends all work of the process).
  const double faults_0 = server->Metric("convserve_gpu_faults_total{gpu=\"0\"").value_or(-1);
  const double faults_1 = server->Metric("convserve_gpu_faults_total{gpu=\"1\"").value_or(-1);
  const double healthy_0 = server->Metric("convserve_gpu_healthy{gpu=\"0\"").value_or(-1);
  const double healthy_1 = server->Metric("convserve_gpu_healthy{gpu=\"1\"").value_or(-1);
  EXPECT_EQ(faults_0 + faults_1, 1) << faults_0 << " " << faults_1;
  EXPECT_EQ(healthy_0, 0);
  EXPECT_EQ(healthy_1, 0);
  absl::StatusOr<v1::InferResponse> after = client.Infer(request.request);
  EXPECT_TRUE(absl::IsUnavailable(after.status())) << after.status();
  absl::StatusOr<int> exit_code = server->child().Wait(absl::Seconds(60));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 3);
  std::printf("two GPUs: faults_total 0=%.0f 1=%.0f, gpu_healthy 0=%.0f 1=%.0f after one fault; "
              "NOT_SERVING; exit code %d\n",
              faults_0, faults_1, healthy_0, healthy_1, *exit_code);
}

TEST(GpuFaultTest, FaultingCandidateIsQuarantinedAndNotTriedAfterRestart) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  absl::StatusOr<ScopedTempDir> dir = ScopedTempDir::Create("gpu_quarantine");
  ASSERT_TRUE(dir.ok());
  const std::vector<std::string> flags = {"--gpus=0", "--testing_fault_candidate_rank=0",
                                          "--plan_cache_dir=" + dir->path() + "/store",
                                          "--log_level=debug"};
  const v1::GraphDef graph = SmallGraph("quarantine");
  const TrafficRequest request = MakeTrafficRequest(graph, {2, 16, 33, 31}, 8, 1e-2);
  // Run 0 faults and quarantines; run 1 (a restart without the stored
  // engine choice) searches again and vetoes the candidate; run 2 (a restart
  // with it) takes the choice from the store and starts no prober.
  double quarantined[3], vetoed[3], starts[3], from_store[3];
  for (int run = 0; run < 3; ++run) {
    if (run == 1) std::filesystem::remove_all(dir->path() + "/store/choice");
    std::unique_ptr<ServerProcess> server =
        ServerProcess::Start(dir->path(), absl::StrCat("server", run, ".log"), flags);
    ASSERT_NE(server, nullptr);
    ConvServeClient client = server->Client();
    ASSERT_TRUE(client.LoadGraph(graph).ok());
    absl::StatusOr<v1::InferResponse> response = client.Infer(request.request);
    ASSERT_TRUE(response.ok()) << response.status() << "\n" << server->child().Output();
    EXPECT_LE(RelativeL2Error(DecodeToDouble(DType::kFloat16, response->output().data()),
                              DecodeToDouble(DType::kFloat16, request.expected)),
              1e-2);
    quarantined[run] = server->Metric("convserve_engine_candidates_quarantined_total").value_or(-1);
    vetoed[run] = server->Metric("convserve_engine_candidates_vetoed_total").value_or(-1);
    starts[run] = server->Metric("convserve_engine_prober_starts_total").value_or(-1);
    from_store[run] =
        server->Metric("convserve_engine_choices_from_store_total").value_or(-1);
    EXPECT_EQ(server->Health(), "SERVING");
    kill(server->child().pid(), SIGTERM);
    absl::StatusOr<int> exit_code = server->child().Wait(absl::Seconds(60));
    ASSERT_TRUE(exit_code.ok());
    EXPECT_EQ(*exit_code, 0);
    const std::string log = server->child().Output();
    // The run before the restart saw the prober fault; the run after never
    // tried the candidate.
    EXPECT_EQ(absl::StrContains(log, "quarantined on GPU 0"), run == 0) << log;
    EXPECT_EQ(absl::StrContains(log, "CUDA context lost"), run == 0) << log;
  }
  EXPECT_EQ(quarantined[0], 1);
  EXPECT_EQ(starts[0], 2) << "the prober restarts after its fault";
  EXPECT_EQ(quarantined[1], 0);
  EXPECT_GE(vetoed[1], 1);
  EXPECT_EQ(starts[1], 1);
  EXPECT_EQ(from_store[1], 0);
  EXPECT_EQ(quarantined[2], 0);
  EXPECT_EQ(starts[2], 0) << "the engine choice came from the plan store";
  EXPECT_GE(from_store[2], 1);
  std::printf("quarantine: before restart quarantined %.0f, prober starts %.0f; after restart "
              "without stored choices quarantined %.0f, vetoed %.0f, prober starts %.0f; with "
              "them quarantined %.0f, prober starts %.0f, choices from the store %.0f\n",
              quarantined[0], starts[0], quarantined[1], vetoed[1], starts[1], quarantined[2],
              starts[2], from_store[2]);
}

}  // namespace
}  // namespace convserve
