#include "tests/test_util/test_server.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"

namespace convserve {

std::unique_ptr<TestServer> TestServer::Start(const InferenceCoreOptions& options,
                                              std::unique_ptr<Backend> backend,
                                              bool serve_metrics) {
  if (backend == nullptr) backend = *CpuBackend::Create({2});
  return Serve(InferenceCore::Create(options, std::move(backend)), serve_metrics);
}

std::unique_ptr<TestServer> TestServer::Start(const InferenceCoreOptions& options,
                                              std::unique_ptr<RequestRunner> runner,
                                              bool serve_metrics) {
  return Serve(InferenceCore::Create(options, std::move(runner)), serve_metrics);
}

std::unique_ptr<TestServer> TestServer::Serve(
    absl::StatusOr<std::unique_ptr<InferenceCore>> core, bool serve_metrics) {
  auto test_server = std::make_unique<TestServer>();
  if (!core.ok()) {
    std::fprintf(stderr, "TestServer: %s\n", core.status().ToString().c_str());
    std::abort();
  }
  test_server->core_ = *std::move(core);
  GrpcServerOptions server_options;
  server_options.listen_address = "127.0.0.1:0";
  server_options.metrics.listen_address = serve_metrics ? "127.0.0.1:0" : "";
  absl::StatusOr<std::unique_ptr<GrpcServer>> server =
      GrpcServer::Start(server_options, test_server->core_.get());
  if (!server.ok()) {
    std::fprintf(stderr, "TestServer: %s\n", server.status().ToString().c_str());
    std::abort();
  }
  test_server->server_ = *std::move(server);
  return test_server;
}

std::string TestServer::address() const { return absl::StrCat("127.0.0.1:", server_->port()); }

}  // namespace convserve
