#include "client/kserve_request_sender.h"

#include <grpcpp/client_context.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

std::string KServeType(v1::DataType type) {
  return type == v1::FLOAT16 ? "FP16" : type == v1::BFLOAT16 ? "BF16" : "FP32";
}

// State of one unary ModelInfer call; deletes itself when the call ends.
struct UnaryCall {
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  std::function<void(const absl::Status&, inference::ModelInferResponse*)> done;

  void Finish(const grpc::Status& status) {
    std::unique_ptr<UnaryCall> self(this);
    done(FromGrpcStatus(status), status.ok() ? &response : nullptr);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<KServeRequestSender>> KServeRequestSender::Create(
    const KServeSenderOptions& options, const InferInput& input,
    const std::vector<ConvServeClient*>& callers) {
  std::unique_ptr<KServeRequestSender> sender(new KServeRequestSender(options, input));
  if (options.streaming) {
    for (ConvServeClient* client : callers) {
      sender->streams_[client] = std::make_unique<ModelInferStream>(client);
    }
  }
  return sender;
}

KServeRequestSender::KServeRequestSender(const KServeSenderOptions& options,
                                         const InferInput& input)
    : options_(options) {
  request_.set_model_name(input.definition.name());
  auto* tensor = request_.add_inputs();
  tensor->set_name("input");
  tensor->set_datatype(KServeType(input.definition.data_type()));
  for (int64_t d : PhysicalDims(input.shape, input.definition.layout())) tensor->add_shape(d);
  request_.add_raw_input_contents(input.bytes);
}

KServeRequestSender::~KServeRequestSender() {
  // Before the members go: a closing stream may still complete requests.
  streams_.clear();
}

std::string KServeRequestSender::transport() const {
  return absl::StrCat(
      options_.streaming ? "ModelStreamInfer streams (one per server)" : "unary ModelInfer",
      ", tensors in the messages");
}

void KServeRequestSender::Call(ConvServeClient& client, absl::Time deadline, CallDone done) {
  if (options_.streaming) {
    streams_.at(&client)->Send(&request_, absl::StrCat(next_id_++), deadline, std::move(done));
    return;
  }
  auto* call = new UnaryCall;
  call->done = std::move(done);
  call->context.set_deadline(absl::ToChronoTime(deadline));
  client.ModelInferAsync(&call->context, &request_, &call->response,
                         [call](grpc::Status status) { call->Finish(status); });
}

void KServeRequestSender::SendAsync(ConvServeClient& client, Done done) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(options_.timeout);
  Call(client, deadline,
       [done = std::move(done)](const absl::Status& status,
                                inference::ModelInferResponse* response) {
         if (!status.ok()) {
           done(status, nullptr);
           return;
         }
         if (response->outputs_size() != 1 || response->raw_output_contents_size() != 1) {
           done(absl::InternalError(absl::StrCat(
                    "ModelInfer response has ", response->outputs_size(), " outputs and ",
                    response->raw_output_contents_size(),
                    " raw_output_contents; expected one of each")),
                nullptr);
           return;
         }
         InferOutput output;
         output.shape.assign(response->outputs(0).shape().begin(),
                             response->outputs(0).shape().end());
         output.bytes = std::move(*response->mutable_raw_output_contents(0));
         done(absl::OkStatus(), &output);
       });
}

}  // namespace convserve
