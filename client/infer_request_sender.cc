#include "client/infer_request_sender.h"

#include <grpcpp/client_context.h>

#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

std::string KServeType(v1::DataType type) {
  return type == v1::FLOAT16 ? "FP16" : type == v1::BFLOAT16 ? "BF16" : "FP32";
}

absl::StatusOr<InferOutput> TakeOutput(v1::InferResponse* response) {
  InferOutput output;
  output.shape.assign(response->output().shape().begin(), response->output().shape().end());
  output.bytes = std::move(*response->mutable_output()->mutable_data());
  return output;
}

absl::StatusOr<InferOutput> TakeOutput(inference::ModelInferResponse* response) {
  if (response->outputs_size() != 1 || response->raw_output_contents_size() != 1) {
    return absl::InternalError(absl::StrCat("ModelInfer response has ", response->outputs_size(),
                                            " outputs and ", response->raw_output_contents_size(),
                                            " raw_output_contents; expected one of each"));
  }
  InferOutput output;
  output.shape.assign(response->outputs(0).shape().begin(), response->outputs(0).shape().end());
  output.bytes = std::move(*response->mutable_raw_output_contents(0));
  return output;
}

// State of one asynchronous call; deletes itself when the call ends.
template <typename Response>
struct AsyncCall {
  grpc::ClientContext context;
  Response response;
  InferRequestSender::Done done;

  void Finish(const grpc::Status& status) {
    std::unique_ptr<AsyncCall> self(this);
    if (!status.ok()) {
      done(FromGrpcStatus(status), nullptr);
      return;
    }
    absl::StatusOr<InferOutput> output = TakeOutput(&response);
    if (!output.ok()) {
      done(output.status(), nullptr);
      return;
    }
    done(absl::OkStatus(), &*output);
  }
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

InferRequestSender::InferRequestSender(Protocol protocol, const InferInput& input)
    : protocol_(protocol) {
  if (protocol == Protocol::kConvServe) {
    convserve_request_.set_graph(input.graph);
    for (int64_t d : input.shape) convserve_request_.mutable_input()->add_shape(d);
    convserve_request_.mutable_input()->set_data(input.bytes);
    return;
  }
  kserve_request_.set_model_name(input.definition.name());
  auto* tensor = kserve_request_.add_inputs();
  tensor->set_name("input");
  tensor->set_datatype(KServeType(input.definition.data_type()));
  for (int64_t d : PhysicalDims(input.shape, input.definition.layout())) tensor->add_shape(d);
  kserve_request_.add_raw_input_contents(input.bytes);
}

absl::StatusOr<InferOutput> InferRequestSender::Send(ConvServeClient& client) const {
  if (protocol_ == Protocol::kConvServe) {
    absl::StatusOr<v1::InferResponse> response = client.Infer(convserve_request_);
    if (!response.ok()) return response.status();
    return TakeOutput(&*response);
  }
  absl::StatusOr<inference::ModelInferResponse> response = client.ModelInfer(kserve_request_);
  if (!response.ok()) return response.status();
  return TakeOutput(&*response);
}

void InferRequestSender::SendAsync(ConvServeClient& client, Done done) const {
  const auto deadline = std::chrono::system_clock::now() + client.options().timeout;
  if (protocol_ == Protocol::kConvServe) {
    auto* call = new AsyncCall<v1::InferResponse>;
    call->done = std::move(done);
    call->context.set_deadline(deadline);
    client.InferAsync(&call->context, &convserve_request_, &call->response,
                      [call](grpc::Status status) { call->Finish(status); });
    return;
  }
  auto* call = new AsyncCall<inference::ModelInferResponse>;
  call->done = std::move(done);
  call->context.set_deadline(deadline);
  client.ModelInferAsync(&call->context, &kserve_request_, &call->response,
                         [call](grpc::Status status) { call->Finish(status); });
}

}  // namespace convserve
