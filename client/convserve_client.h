// A blocking C++ client for a convserve server: the convserve.v1 admin and
// Infer calls and the KServe v2 calls. gRPC errors come back as absl::Status
// with the server's code and message. Thread-safe (gRPC stubs are).
#ifndef CONVSERVE_CLIENT_CONVSERVE_CLIENT_H_
#define CONVSERVE_CLIENT_CONVSERVE_CLIENT_H_

#include <grpcpp/channel.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "convserve/v1/convserve.grpc.pb.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

namespace convserve {

struct ClientOptions {
  // host:port of the server.
  std::string address = "localhost:8001";
  // Largest message sent or received.
  int max_message_bytes = 256 << 20;
  // Deadline of each call.
  std::chrono::milliseconds timeout{60000};
};

class ConvServeClient {
 public:
  explicit ConvServeClient(const ClientOptions& options);

  absl::StatusOr<v1::LoadGraphResponse> LoadGraph(const v1::GraphDef& graph);
  absl::Status UnloadGraph(const std::string& graph);
  absl::StatusOr<v1::ListGraphsResponse> ListGraphs();
  absl::StatusOr<v1::GraphInfo> GetGraph(const std::string& graph);
  absl::StatusOr<v1::InferResponse> Infer(const v1::InferRequest& request);

  absl::StatusOr<bool> ServerLive();
  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(const std::string& model);
  absl::StatusOr<inference::ModelInferResponse> ModelInfer(
      const inference::ModelInferRequest& request);

 private:
  void Prepare(grpc::ClientContext* context) const;

  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ConvServe::Stub> convserve_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve_;
};

// gRPC status -> absl::Status, same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_CONVSERVE_CLIENT_H_
