#include "tests/test_util/test_server.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"

namespace convserve {

std::unique_ptr<TestServer> TestServer::Start(const InferenceCoreOptions& options,
                                              std::unique_ptr<Backend> backend,
                                              bool serve_metrics) {
  TestServerOptions server_options;
  server_options.serve_metrics = serve_metrics;
  return Start(options, std::move(backend), server_options);
}

std::unique_ptr<TestServer> TestServer::Start(const InferenceCoreOptions& options,
                                              std::unique_ptr<Backend> backend,
                                              const TestServerOptions& server_options) {
  if (backend == nullptr) backend = *CpuBackend::Create({2});
  return Serve(InferenceCore::Create(options, std::move(backend)), server_options);
}

std::unique_ptr<TestServer> TestServer::Start(const InferenceCoreOptions& options,
                                              std::unique_ptr<RequestRunner> runner,
                                              bool serve_metrics) {
  TestServerOptions server_options;
  server_options.serve_metrics = serve_metrics;
  return Serve(InferenceCore::Create(options, std::move(runner)), server_options);
}

std::unique_ptr<TestServer> TestServer::Serve(
    absl::StatusOr<std::unique_ptr<InferenceCore>> core, const TestServerOptions& options) {
  absl::StatusOr<std::unique_ptr<TestServer>> server = TryServe(std::move(core), options);
  if (!server.ok()) {
    std::fprintf(stderr, "TestServer: %s\n", server.status().ToString().c_str());
    std::abort();
  }
  return *std::move(server);
}

absl::StatusOr<std::unique_ptr<TestServer>> TestServer::TryStart(
    const InferenceCoreOptions& options, const TestServerOptions& server_options) {
  return TryServe(InferenceCore::Create(options, *CpuBackend::Create({2})), server_options);
}

absl::StatusOr<std::unique_ptr<TestServer>> TestServer::TryServe(
    absl::StatusOr<std::unique_ptr<InferenceCore>> core, const TestServerOptions& options) {
  if (!core.ok()) return core.status();
  auto test_server = std::make_unique<TestServer>();
  test_server->core_ = *std::move(core);
  GrpcServerOptions server_options;
  server_options.listen_address = "127.0.0.1:0";
  server_options.metrics.listen_address = options.serve_metrics ? "127.0.0.1:0" : "";
  server_options.shared_memory = options.shared_memory;
  server_options.tls = options.tls;
  server_options.graph_management = options.graph_management;
  server_options.graph_dir = options.graph_dir;
  server_options.grpc_threads = options.grpc_threads;
  server_options.grpc_queues = options.grpc_queues;
  absl::StatusOr<std::unique_ptr<GrpcServer>> server =
      GrpcServer::Start(server_options, test_server->core_.get());
  if (!server.ok()) return server.status();
  test_server->server_ = *std::move(server);
  return test_server;
}

std::string TestServer::address() const { return absl::StrCat("127.0.0.1:", server_->port()); }

ClientOptions TestServer::client_options() const {
  ClientOptions options;
  options.address = address();
  return options;
}

}  // namespace convserve
