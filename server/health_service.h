// grpc.health.v1.Health on gRPC's completion queues. gRPC's own health
// service is on its callback API, and one method there puts every call of
// the server back on the callback threads (server/queued_calls.h). It
// answers as gRPC's own does: the server as a whole ("") is known, other
// names are NOT_FOUND for Check and SERVICE_UNKNOWN for Watch; after
// Shutdown the status stays NOT_SERVING and every open watch ends (a watch
// of "" told NOT_SERVING first; one of another name told nothing more).
#ifndef CONVSERVE_SERVER_HEALTH_SERVICE_H_
#define CONVSERVE_SERVER_HEALTH_SERVICE_H_

#include <memory>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/queued_calls.h"

namespace convserve {

class HealthService {
 public:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;

  HealthService() = default;
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  // Registered with a server builder before it starts.
  grpc::Service* grpc_service() { return &async_; }
  // Once the server has started: asks for Check and Watch calls on `queue`.
  void Listen(CallQueue queue);

  // SERVING or NOT_SERVING; ignored after Shutdown. Open watches are told.
  void SetServing(bool serving);
  // NOT_SERVING for good; open watches are told, then ended.
  void Shutdown();
  Status status() const;

 private:
  class Watch;

  void Check(ServerCall* rpc, const grpc::health::v1::HealthCheckRequest* request,
             grpc::health::v1::HealthCheckResponse* response);
  // A watch that has started: registered and told the current status (and
  // whether the service is shut down: then the watch ends once told).
  void Add(Watch* watch);
  void Remove(Watch* watch);

  grpc::health::v1::Health::AsyncService async_;
  std::vector<std::shared_ptr<const void>> methods_;
  mutable absl::Mutex mu_;
  Status status_ ABSL_GUARDED_BY(mu_) = grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::set<Watch*> watches_ ABSL_GUARDED_BY(mu_);
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_HEALTH_SERVICE_H_
