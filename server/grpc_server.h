// The gRPC server: both services, health checking and reflection on one or
// more addresses, every call on completion queues (server/queued_calls.h). Owned by
// main() or by a test; the core must outlive it.
#ifndef CONVSERVE_SERVER_GRPC_SERVER_H_
#define CONVSERVE_SERVER_GRPC_SERVER_H_

#include <grpcpp/server.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/convserve_service.h"
#include "server/graph_management_policy.h"
#include "server/graph_repository.h"
#include "server/health_service.h"
#include "server/inference_core.h"
#include "server/kserve_service.h"
#include "server/queued_calls.h"
#include "server/server_metrics.h"
#include "server/shared_memory_registry.h"
#include "server/tls_credentials.h"

namespace convserve {

struct GrpcServerOptions {
  // Where to listen: host:port (port 0 picks a free port, see port()) or
  // unix:PATH; several, comma-separated, serve the same calls (e.g. TCP for
  // remote clients and a Unix socket for those on this machine).
  std::string listen_address = "0.0.0.0:8001";
  // Largest request or response message in bytes.
  int max_message_bytes = 256 << 20;
  // TLS or mutual TLS on the port; plain text by default.
  ServerTlsOptions tls;
  // Who may load and unload graphs over gRPC.
  GraphManagementOptions graph_management;
  // Directory of graph files loaded before the port opens, from which
  // RepositoryModelLoad can load them again; empty for none.
  std::string graph_dir;
  // Prometheus /metrics endpoint and graph-label bound.
  ServerMetricsOptions metrics;
  // Bounds of the KServe shared-memory regions.
  SharedMemoryLimits shared_memory;
  // Threads that run every call's events on gRPC completion queues
  // (server/queued_calls.h), and the queues they share: thread i serves
  // queue i % grpc_queues.
  int grpc_threads = 4;
  int grpc_queues = 1;
  // Called (once, from a worker thread) when no GPU serves any more,
  // after health has turned NOT_SERVING; main() shuts down and exits
  // non-zero so the orchestrator restarts the process.
  std::function<void()> on_no_healthy_device;
};

class GrpcServer {
 public:
  // Loads the graph directory, binds and starts serving. INVALID_ARGUMENT
  // for an empty address list or a thread or queue count out of range
  // (grpc_threads < 1; grpc_queues outside 1..grpc_threads), UNAVAILABLE
  // when an address cannot be bound
  // (the error names it); a bad TLS file, token file or graph file fails the
  // start with its own error.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const GrpcServerOptions& options,
                                                           InferenceCore* core);
  ~GrpcServer();

  // The bound port of the first address (1 for a Unix socket).
  int port() const { return ports_.front(); }
  // The addresses served, a TCP one with its bound port:
  // "0.0.0.0:8001 (port 8001), unix:/run/convserve/grpc.sock".
  std::string addresses() const;
  ServerMetrics& metrics() { return *metrics_; }

  // SIGHUP: re-reads the graph management token file (the TLS files are
  // re-read on their own, every tls.reload_interval_seconds). On error the
  // old token stays in force.
  absl::Status Reload() { return management_->ReloadToken(); }

  // Graceful stop: health turns NOT_SERVING, new requests are refused,
  // accepted ones finish, then calls still open after `grace` are cancelled.
  void Shutdown(absl::Duration grace);

 private:
  GrpcServer(InferenceCore* core, std::unique_ptr<ServerMetrics> metrics,
             const SharedMemoryLimits& shared_memory_limits,
             std::unique_ptr<GraphManagementPolicy> management,
             std::unique_ptr<GraphRepository> repository)
      : core_(core),
        metrics_(std::move(metrics)),
        management_(std::move(management)),
        repository_(std::move(repository)),
        shared_memory_(core->mutable_runner(), shared_memory_limits),
        convserve_(core, metrics_.get(), management_.get()),
        kserve_(core, metrics_.get(), &shared_memory_, management_.get(), repository_.get()) {}

  InferenceCore* const core_;  // owned by the caller of Start
  const std::unique_ptr<ServerMetrics> metrics_;
  const std::unique_ptr<GraphManagementPolicy> management_;
  const std::unique_ptr<GraphRepository> repository_;  // null without a graph directory
  SharedMemoryRegistry shared_memory_;
  // Runs the calls that may block (server/queued_calls.h); drained after
  // the queues.
  RequestExecutor control_{RequestExecutorOptions{4, 256, "cs-control"}};
  ConvServeService convserve_;
  KServeService kserve_;
  HealthService health_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<QueueThreads> threads_;  // stopped after server_ shuts down
  std::vector<std::string> addresses_;  // as given to --listen
  std::vector<int> ports_;               // bound, one per address
  // Shutdown may be called from a signal thread and a destructor: the
  // second caller waits for the first.
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  std::atomic<bool> no_healthy_device_{false};
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_GRPC_SERVER_H_
