#include "server/convserve_service.h"

#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/grpc_status.h"
#include "server/proto_convert.h"
#include "server/tensor_wire.h"

namespace convserve {
namespace {

absl::Status RequireGraphName(const std::string& graph) {
  if (graph.empty()) return absl::InvalidArgumentError("graph is required (a name or an id)");
  return absl::OkStatus();
}

v1::GraphInfo::State StateToProto(WarmupState state) {
  switch (state) {
    case WarmupState::kWarming:
      return v1::GraphInfo::WARMING;
    case WarmupState::kReady:
      return v1::GraphInfo::READY;
    case WarmupState::kFailed:
      return v1::GraphInfo::FAILED;
  }
  return v1::GraphInfo::STATE_UNSPECIFIED;
}

// GetGraph's view of a loaded graph: its definition, batching and warm-up.
void FillGraphInfo(const InferenceCore& core, const Graph& graph, v1::GraphInfo* info) {
  const std::optional<DynamicBatchingOptions> batching = core.Batching(graph.id());
  GraphInfoToProto(graph, info, batching ? &*batching : nullptr);
  const WarmupStatus warmup = core.WarmupOf(graph.id());
  info->set_state(StateToProto(warmup.state));
  for (const Shape& shape : warmup.shapes) {
    v1::TensorShape* proto = info->add_warmup_shapes();
    for (int64_t dim : shape) proto->add_dims(dim);
  }
  info->set_warmup_seconds(warmup.seconds);
  info->set_warmup_error(warmup.error);
}

WarmupRequest WarmupFromProto(const v1::Warmup& proto) {
  WarmupRequest warmup;
  for (const v1::TensorShape& shape : proto.shapes()) {
    warmup.shapes.emplace_back(shape.dims().begin(), shape.dims().end());
  }
  warmup.disabled = proto.disabled();
  warmup.wait = !proto.return_before_ready();
  return warmup;
}

}  // namespace

void ConvServeService::LoadGraph(ServerCall* rpc, grpc::ByteBuffer* request_bytes,
                                 grpc::ByteBuffer* response_bytes) {
  // Authorized before the bytes are parsed: a refused caller's graph is
  // never read.
  absl::Status allowed = management_->Authorize(rpc->client_metadata(), "LoadGraph");
  if (!allowed.ok()) return FinishCall(rpc, allowed);
  v1::LoadGraphRequest request;
  {
    grpc::ByteBuffer bytes(*request_bytes);  // shares the slices; the reader consumes its own
    grpc::ProtoBufferReader reader(&bytes);
    if (!request.ParseFromZeroCopyStream(&reader)) {
      return FinishCall(rpc, absl::InvalidArgumentError(
                                 "the request is not a valid convserve.v1.LoadGraphRequest"));
    }
  }
  request_bytes->Clear();  // parsed: nothing reads them again
  if (!request.has_graph()) {
    return FinishCall(rpc, absl::InvalidArgumentError("graph is required"));
  }
  // Moving the weights out of the request avoids a copy.
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(request.mutable_graph());
  if (!spec.ok()) return FinishCall(rpc, spec.status());
  std::optional<DynamicBatchingOptions> batching;
  if (request.has_dynamic_batching()) {
    batching = DynamicBatchingFromProto(request.dynamic_batching(), core_->default_batching());
  }
  // The warm-up is waited for without holding a thread: the call is
  // answered from the warm-up's thread as it ends.
  WarmupRequest warmup = WarmupFromProto(request.warmup());
  const bool wait = warmup.wait;
  warmup.wait = false;
  absl::StatusOr<GraphRegistry::AddResult> added =
      core_->LoadGraph(*std::move(spec), std::move(batching), warmup);
  if (!added.ok()) return FinishCall(rpc, added.status());
  v1::LoadGraphResponse response;
  response.set_graph_id(added->graph->id());
  response.set_already_loaded(added->already_loaded);
  const auto answer = [this, rpc, response_bytes](v1::LoadGraphResponse& response,
                                                  const std::shared_ptr<const Graph>& graph,
                                                  const absl::Status& status) {
    if (status.ok()) {
      FillGraphInfo(*core_, *graph, response.mutable_graph());
      grpc::Slice slice(response.SerializeAsString());
      *response_bytes = grpc::ByteBuffer(&slice, 1);
    }
    rpc->Finish(ToGrpcStatus(status));
  };
  if (!wait) return answer(response, added->graph, absl::OkStatus());
  core_->WhenWarmedUp(added->graph, [answer, response = std::move(response), graph = added->graph](
                                        absl::StatusOr<WarmupStatus> ended) mutable {
    answer(response, graph, ended.status());
  });
}

void ConvServeService::UnloadGraph(ServerCall* rpc, const v1::UnloadGraphRequest* request,
                                   v1::UnloadGraphResponse* /*response*/) {
  absl::Status status = management_->Authorize(rpc->client_metadata(), "UnloadGraph");
  if (status.ok()) status = RequireGraphName(request->graph());
  if (status.ok()) status = core_->UnloadGraph(request->graph());
  return FinishCall(rpc, status);
}

void ConvServeService::ListGraphs(ServerCall* rpc, const v1::ListGraphsRequest* /*request*/,
                                  v1::ListGraphsResponse* response) {
  for (const auto& graph : core_->ListGraphs()) {
    FillGraphInfo(*core_, *graph, response->add_graphs());
  }
  return FinishCall(rpc, absl::OkStatus());
}

void ConvServeService::GetGraph(ServerCall* rpc, const v1::GetGraphRequest* request,
                                v1::GetGraphResponse* response) {
  absl::Status status = RequireGraphName(request->graph());
  if (!status.ok()) return FinishCall(rpc, status);
  absl::StatusOr<std::shared_ptr<const Graph>> graph = core_->FindGraph(request->graph());
  if (!graph.ok()) return FinishCall(rpc, graph.status());
  FillGraphInfo(*core_, **graph, response->mutable_graph());
  return FinishCall(rpc, absl::OkStatus());
}

void ConvServeService::Infer(ServerCall* rpc, const grpc::ByteBuffer* request_bytes,
                             grpc::ByteBuffer* response_bytes) {
  // The tensor goes from gRPC's slices into a host buffer once (page-locked
  // on GPU servers); the rest is parsed as usual.
  RequestRunner* runner = core_->mutable_runner();
  absl::StatusOr<WireConvServeRequest> wire = ParseInferRequest(
      *request_bytes, [runner](size_t bytes) { return runner->AllocateHostBuffer(bytes); });
  if (!wire.ok()) {
    metrics_->RequestRejected("", "convserve", wire.status().code(), 0);
    rpc->Finish(ToGrpcStatus(wire.status()));
    return;
  }
  // True once the client cancels and also once the deadline passes, even if
  // the client never says so: gRPC's server deadline filter (on by default)
  // cancels the call. tests/integration/cancellation_test.cc checks both.
  StartInfer(
      *std::move(wire), [rpc] { return rpc->IsCancelled(); },
      [rpc, response_bytes](const absl::Status& status, grpc::ByteBuffer* bytes) {
        if (status.ok()) *response_bytes = std::move(*bytes);
        rpc->Finish(ToGrpcStatus(status));
      });
  return;
}

void ConvServeService::Listen(CallQueue queue, int hot_calls, RequestExecutor* control) {
  using S = ConvServeAsyncService;
  ConvServeAsyncService* service = &async_;
  methods_.push_back(
      ListenUnary(service, &S::RequestInfer, this, &ConvServeService::Infer, queue, hot_calls));
  methods_.push_back(ListenUnary(service, &S::RequestLoadGraph, this, &ConvServeService::LoadGraph,
                                 queue, 1, control));
  methods_.push_back(ListenUnary(service, &S::RequestUnloadGraph, this,
                                 &ConvServeService::UnloadGraph, queue, 1, control));
  methods_.push_back(
      ListenUnary(service, &S::RequestListGraphs, this, &ConvServeService::ListGraphs, queue, 1));
  methods_.push_back(
      ListenUnary(service, &S::RequestGetGraph, this, &ConvServeService::GetGraph, queue, 1));
  methods_.push_back(ListenUnary(service, &S::RequestGetStatistics, this,
                                 &ConvServeService::GetStatistics, queue, 1));
}

void ConvServeService::StartInfer(WireConvServeRequest wire, std::function<bool()> cancelled,
                                  InferDone done) {
  const absl::Time start = absl::Now();
  const auto reject = [&](const absl::Status& status, const std::string& graph) {
    metrics_->RequestRejected(graph, "convserve", status.code(),
                              absl::ToDoubleSeconds(absl::Now() - start));
    done(status, nullptr);
  };
  RequestRunner* runner = core_->mutable_runner();
  const v1::InferRequest& request = wire.request;
  absl::Status status = RequireGraphName(request.graph());
  if (!status.ok()) return reject(status, "");
  absl::StatusOr<std::shared_ptr<const Graph>> graph = core_->FindGraph(request.graph());
  if (!graph.ok()) return reject(graph.status(), "");
  absl::StatusOr<WireTensor> input = InferInputFromProto(**graph, request, &wire.data);
  if (!input.ok()) return reject(input.status(), (*graph)->name());

  const DType dtype = (*graph)->spec().dtype;
  const Layout layout = (*graph)->spec().layout;
  InferCall call;
  call.graph = *std::move(graph);
  call.input_shape = std::move(input->shape);
  call.input = input->bytes;
  if (!wire.data.empty()) call.input_memory = wire.data.front();
  // The output goes into a host buffer that gRPC then sends as is.
  absl::StatusOr<std::vector<Shape>> shapes = call.graph->InferShapes(call.input_shape);
  std::optional<TensorMemory> output;
  auto response = std::make_shared<v1::InferResponse>();
  if (shapes.ok()) {
    absl::StatusOr<TensorMemory> buffer =
        runner->AllocateHostBuffer(NumElements(shapes->back()) * DTypeSize(dtype));
    if (!buffer.ok()) return reject(buffer.status(), call.graph->name());
    output = *buffer;
    call.output_memory = *std::move(buffer);
  } else {
    call.output = response->mutable_output()->mutable_data();  // the core answers the error
  }
  response->set_graph_id(call.graph->id());
  call.cancelled = std::move(cancelled);
  metrics_->RequestStarted();
  const int64_t bytes_in = static_cast<int64_t>(input->bytes.size());
  call.done = [this, response, output, dtype, layout, start, done = std::move(done),
               name = call.graph->name(), id = call.graph->id(), bytes_in,
               request_alive = std::make_shared<WireConvServeRequest>(std::move(wire))](
                  const absl::Status& status, const Shape& shape, const InferTimings& timings) {
    int64_t bytes_out = 0;
    absl::Status result = status;
    absl::StatusOr<grpc::ByteBuffer> bytes = absl::UnknownError("not serialized");
    if (status.ok()) {
      v1::Tensor* tensor = response->mutable_output();
      for (int64_t d : shape) tensor->add_shape(d);
      tensor->set_data_type(DataTypeToProto(dtype));
      tensor->set_layout(LayoutToProto(layout));
      bytes_out = NumElements(shape) * static_cast<int64_t>(DTypeSize(dtype));
      bytes = SerializeInferResponse(*response, *output);
      if (!bytes.ok()) result = bytes.status();
    }
    metrics_->RequestFinished(name, id, "convserve", result.code(),
                              absl::ToDoubleSeconds(absl::Now() - start), timings, bytes_in,
                              bytes_out);
    done(result, result.ok() ? &*bytes : nullptr);
  };
  core_->Infer(std::move(call));
}

void ConvServeService::GetStatistics(ServerCall* rpc, const v1::GetStatisticsRequest* request,
                                     v1::GetStatisticsResponse* response) {
  if (!request->graph().empty()) {
    absl::StatusOr<std::shared_ptr<const Graph>> graph = core_->FindGraph(request->graph());
    if (!graph.ok()) return FinishCall(rpc, graph.status());
    *response = metrics_->Statistics((*graph)->name());
  } else {
    *response = metrics_->Statistics("");
  }
  return FinishCall(rpc, absl::OkStatus());
}

}  // namespace convserve
