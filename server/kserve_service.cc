#include "server/kserve_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/grpc_status.h"
#include "server/kserve_stream.h"
#include "server/proto_convert.h"
#include "server/version.h"

namespace convserve {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Graph>> KServeService::FindModel(
    const std::string& name, const std::string& version) const {
  if (name.empty()) return absl::InvalidArgumentError("model name is required");
  if (!version.empty() && version != "1") {
    return absl::NotFoundError(absl::StrCat("model '", name, "' has no version '", version,
                                            "'; its only version is '1'"));
  }
  absl::StatusOr<std::shared_ptr<const Graph>> graph = core_->FindGraph(name);
  if (!graph.ok() && absl::IsNotFound(graph.status())) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded"));
  }
  return graph;
}

grpc::ServerUnaryReactor* KServeService::ServerLive(grpc::CallbackServerContext* context,
                                                    const inference::ServerLiveRequest*,
                                                    inference::ServerLiveResponse* response) {
  response->set_live(true);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ServerReady(grpc::CallbackServerContext* context,
                                                     const inference::ServerReadyRequest*,
                                                     inference::ServerReadyResponse* response) {
  response->set_ready(core_->ready());
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ModelReady(grpc::CallbackServerContext* context,
                                                    const inference::ModelReadyRequest* request,
                                                    inference::ModelReadyResponse* response) {
  // An unknown model is "not ready", not an error, as in Triton.
  response->set_ready(core_->ready() && FindModel(request->name(), request->version()).ok());
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  response->set_name("convserve");
  response->set_version(kConvServeVersion);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  absl::StatusOr<std::shared_ptr<const Graph>> graph =
      FindModel(request->name(), request->version());
  if (!graph.ok()) return Finish(context, graph.status());
  KServeMetadataToProto(**graph, response);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ModelInfer(grpc::CallbackServerContext* context,
                                                    const inference::ModelInferRequest* request,
                                                    inference::ModelInferResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // True once the client cancels and also once the deadline passes, even if
  // the client never says so: gRPC's server deadline filter (on by default)
  // cancels the call. tests/integration/cancellation_test.cc checks both.
  StartInfer(*request, response, [context] { return context->IsCancelled(); },
             [reactor](const absl::Status& status) { reactor->Finish(ToGrpcStatus(status)); });
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
KServeService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new ModelStreamReactor(context, this);  // deletes itself in OnDone
}

void KServeService::StartInfer(const inference::ModelInferRequest& request,
                               inference::ModelInferResponse* response,
                               std::function<bool()> cancelled,
                               std::function<void(const absl::Status&)> done) {
  const absl::Time start = absl::Now();
  const auto reject = [&](const absl::Status& status, const std::string& graph) {
    metrics_->RequestRejected(graph, "kserve", status.code());
    done(status);
  };
  absl::StatusOr<std::shared_ptr<const Graph>> graph =
      FindModel(request.model_name(), request.model_version());
  if (!graph.ok()) return reject(graph.status(), "");
  absl::Status outputs_ok = CheckKServeOutputs(request);
  if (!outputs_ok.ok()) return reject(outputs_ok, (*graph)->name());
  absl::StatusOr<WireTensor> input = KServeInputFromProto(**graph, request);
  if (!input.ok()) return reject(input.status(), (*graph)->name());

  std::shared_ptr<const Graph> model = *graph;
  response->set_model_name(model->name());
  response->set_model_version("1");
  response->set_id(request.id());
  InferCall call;
  call.graph = model;
  call.input_shape = std::move(input->shape);
  call.input = input->bytes;
  call.output = response->add_raw_output_contents();
  call.cancelled = std::move(cancelled);
  metrics_->RequestStarted();
  call.done = [this, response, model, start, done = std::move(done),
               bytes_in = static_cast<int64_t>(input->bytes.size())](
                  const absl::Status& status, const Shape& shape, const InferTimings& timings) {
    int64_t bytes_out = 0;
    if (status.ok()) {
      auto* output = response->add_outputs();
      output->set_name(kOutputName);
      output->set_datatype(KServeDataType(model->spec().dtype));
      for (int64_t d : KServeShape(*model, shape)) output->add_shape(d);
      bytes_out = static_cast<int64_t>(response->raw_output_contents(0).size());
    } else {
      const std::string id = response->id();
      response->Clear();  // never a partial result
      response->set_id(id);
    }
    metrics_->RequestFinished(model->name(), model->id(), "kserve", status.code(),
                              absl::ToDoubleSeconds(absl::Now() - start), timings, bytes_in,
                              bytes_out);
    done(status);
  };
  core_->Infer(std::move(call));
}

}  // namespace convserve
