// KServe ModelInfer in every form convserve-load measures: unary calls or
// one ModelStreamInfer stream per server (model_infer_stream.h). The closed
// and open loops see only InferRequestSender.
#ifndef CONVSERVE_CLIENT_KSERVE_REQUEST_SENDER_H_
#define CONVSERVE_CLIENT_KSERVE_REQUEST_SENDER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/infer_request_sender.h"
#include "client/model_infer_stream.h"

namespace convserve {

struct KServeSenderOptions {
  // One ModelStreamInfer stream per server instead of unary calls.
  bool streaming = false;
  // Deadline of each request.
  std::chrono::milliseconds timeout{30000};
};

class KServeRequestSender final : public InferRequestSender {
 public:
  // `callers` are the clients requests go to (SendAsync's `client` is one of
  // them); they outlive the sender.
  static absl::StatusOr<std::unique_ptr<KServeRequestSender>> Create(
      const KServeSenderOptions& options, const InferInput& input,
      const std::vector<ConvServeClient*>& callers);
  // Closes the streams.
  ~KServeRequestSender() override;

  void SendAsync(ConvServeClient& client, Done done) override;
  Protocol protocol() const override { return Protocol::kKServe; }
  std::string transport() const override;

 private:
  using CallDone =
      std::function<void(const absl::Status& status, inference::ModelInferResponse* response)>;

  KServeRequestSender(const KServeSenderOptions& options, const InferInput& input);

  // Sends the request unary or on the client's stream.
  void Call(ConvServeClient& client, absl::Time deadline, CallDone done);

  const KServeSenderOptions options_;
  // The one request every call sends, read-only.
  inference::ModelInferRequest request_;
  // With streaming: one stream per caller client.
  std::map<ConvServeClient*, std::unique_ptr<ModelInferStream>> streams_;
  // Request ids on streams.
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_KSERVE_REQUEST_SENDER_H_
