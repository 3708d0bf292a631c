// A real convserve gRPC server on a loopback port inside the test process.
#ifndef CONVSERVE_TESTS_TEST_UTIL_TEST_SERVER_H_
#define CONVSERVE_TESTS_TEST_UTIL_TEST_SERVER_H_

#include <memory>
#include <string>

#include "client/convserve_client.h"
#include "engine/backend.h"
#include "engine/runtime/request_runner.h"
#include "server/grpc_server.h"
#include "server/inference_core.h"
#include "server/shared_memory_registry.h"

namespace convserve {

// How the gRPC server around the core is set up.
struct TestServerOptions {
  // Serve /metrics on another free loopback port (server()->metrics().port());
  // off by default because stopping its HTTP server takes about 2 s.
  bool serve_metrics = false;
  // Bounds of the KServe shared-memory regions (the server flags'
  // defaults unless a test makes them small).
  SharedMemoryLimits shared_memory;
  // TLS of the port (plain text by default), graph management policy and
  // graph directory, as GrpcServerOptions.
  ServerTlsOptions tls;
  GraphManagementOptions graph_management;
  std::string graph_dir;
  // gRPC's threads and the completion queues they share
  // (GrpcServerOptions::grpc_threads and grpc_queues, the server's defaults).
  int grpc_threads = 4;
  int grpc_queues = 1;
};

class TestServer {
 public:
  // Starts on 127.0.0.1 with a free port. `backend` defaults to the CPU
  // backend with 2 threads; `serve_metrics` as in TestServerOptions. Aborts
  // the test binary if the server cannot start.
  static std::unique_ptr<TestServer> Start(const InferenceCoreOptions& options = {},
                                           std::unique_ptr<Backend> backend = nullptr,
                                           bool serve_metrics = false);
  // Serves with `runner` (e.g. the GPU device pool).
  static std::unique_ptr<TestServer> Start(const InferenceCoreOptions& options,
                                           std::unique_ptr<RequestRunner> runner,
                                           bool serve_metrics = false);
  // With every server option; `backend` may be null (the default above).
  // Aborts the test binary if the server cannot start; TryStart returns why.
  static std::unique_ptr<TestServer> Start(const InferenceCoreOptions& options,
                                           std::unique_ptr<Backend> backend,
                                           const TestServerOptions& server_options);

  static absl::StatusOr<std::unique_ptr<TestServer>> TryStart(
      const InferenceCoreOptions& options, const TestServerOptions& server_options);

  // "127.0.0.1:PORT".
  std::string address() const;
  // A client's options for this server (the address; the rest default).
  ClientOptions client_options() const;
  InferenceCore* core() { return core_.get(); }
  GrpcServer* server() { return server_.get(); }

 private:
  static std::unique_ptr<TestServer> Serve(absl::StatusOr<std::unique_ptr<InferenceCore>> core,
                                           const TestServerOptions& server_options);
  static absl::StatusOr<std::unique_ptr<TestServer>> TryServe(
      absl::StatusOr<std::unique_ptr<InferenceCore>> core, const TestServerOptions& options);

  std::unique_ptr<InferenceCore> core_;
  std::unique_ptr<GrpcServer> server_;
};

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_TEST_SERVER_H_
