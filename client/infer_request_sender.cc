#include "client/infer_request_sender.h"

#include <grpcpp/client_context.h>

#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace convserve {
namespace {

// State of one asynchronous Infer call; deletes itself when the call ends.
struct InferCall {
  explicit InferCall(LiveCalls* calls) : hold(calls) {}

  // First: destroyed after the context.
  LiveCalls::Hold hold;
  grpc::ClientContext context;
  v1::InferResponse response;
  InferRequestSender::Done done;

  void Finish(const grpc::Status& status) {
    std::unique_ptr<InferCall> self(this);
    if (!status.ok()) {
      done(FromGrpcStatus(status), nullptr);
      return;
    }
    InferOutput output;
    output.shape.assign(response.output().shape().begin(), response.output().shape().end());
    output.bytes = std::move(*response.mutable_output()->mutable_data());
    output.byte_size = static_cast<int64_t>(output.bytes.size());
    done(absl::OkStatus(), &output);
  }
};

class ConvServeSender final : public InferRequestSender {
 public:
  explicit ConvServeSender(const InferInput& input) {
    request_.set_graph(input.graph);
    for (int64_t d : input.shape) request_.mutable_input()->add_shape(d);
    request_.mutable_input()->set_data(input.bytes);
  }

  void SendAsync(ConvServeClient& client, Done done) override {
    InferCall* call = Start(client, std::move(done));
    client.InferAsync(&call->context, &request_, &call->response,
                      [call](grpc::Status status) { call->Finish(status); });
  }

  void SendBlocking(ConvServeClient& client, Done done) override {
    InferCall* call = Start(client, std::move(done));
    call->Finish(client.InferBlocking(&call->context, request_, &call->response));
  }

  ~ConvServeSender() override { live_calls_.AwaitNone(); }

  Protocol protocol() const override { return Protocol::kConvServe; }
  std::string transport() const override { return "unary Infer, tensors in the messages"; }

 private:
  InferCall* Start(ConvServeClient& client, Done done) {
    auto* call = new InferCall(&live_calls_);
    call->done = std::move(done);
    call->context.set_deadline(std::chrono::system_clock::now() + client.options().timeout);
    return call;
  }

  // Read-only once built: every call sends it.
  v1::InferRequest request_;
  // A call's ClientContext holds a reference to the channel and is destroyed
  // on the gRPC thread that ends the call, after `done` ran: the sender waits
  // for every call to be gone before it goes, so its clients (and their
  // channels) outlive them and no channel loses its last reference on a gRPC
  // thread (which shuts gRPC's callback threads down from one of them).
  LiveCalls live_calls_;
};

}  // namespace

absl::StatusOr<Protocol> ParseProtocol(const std::string& name) {
  if (name == "convserve") return Protocol::kConvServe;
  if (name == "kserve") return Protocol::kKServe;
  return absl::InvalidArgumentError(
      absl::StrCat("--protocol '", name, "': must be convserve or kserve"));
}

const char* ProtocolName(Protocol protocol) {
  return protocol == Protocol::kKServe ? "kserve" : "convserve";
}

std::vector<int64_t> PhysicalDims(const std::vector<int64_t>& logical, v1::Layout layout) {
  if ((layout != v1::NHWC && layout != v1::NDHWC) || logical.size() < 2) return logical;
  std::vector<int64_t> physical = {logical[0]};
  physical.insert(physical.end(), logical.begin() + 2, logical.end());
  physical.push_back(logical[1]);
  return physical;
}

absl::Status InferOutput::FetchBytes() {
  if (slot == nullptr || static_cast<int64_t>(bytes.size()) == byte_size) return absl::OkStatus();
  return slot->Read(byte_size, &bytes);
}

void InferRequestSender::SendBlocking(ConvServeClient& client, Done done) {
  // Shared with the callback, which may still be returning when the wait
  // below ends.
  struct Result {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
    std::optional<InferOutput> output ABSL_GUARDED_BY(mu);
  };
  auto result = std::make_shared<Result>();
  SendAsync(client, [result](const absl::Status& status, InferOutput* output) {
    absl::MutexLock lock(&result->mu);
    result->status = status;
    if (status.ok()) result->output = std::move(*output);
    result->done = true;
  });
  absl::Status status;
  std::optional<InferOutput> output;
  {
    absl::MutexLock lock(&result->mu);
    result->mu.Await(absl::Condition(&result->done));
    status = result->status;
    output = std::move(result->output);
  }
  done(status, output.has_value() ? &*output : nullptr);
}

absl::StatusOr<InferOutput> InferRequestSender::Send(ConvServeClient& client) {
  absl::StatusOr<InferOutput> result = absl::InternalError("the sender never answered");
  SendBlocking(client, [&result](const absl::Status& status, InferOutput* output) {
    if (status.ok()) {
      result = std::move(*output);
    } else {
      result = status;
    }
  });
  return result;
}

std::unique_ptr<InferRequestSender> ConvServeRequestSender(const InferInput& input) {
  return std::make_unique<ConvServeSender>(input);
}

}  // namespace convserve
