#include "server/kserve_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/grpc_status.h"
#include "server/kserve_stream.h"
#include "server/proto_convert.h"
#include "server/tensor_wire.h"
#include "server/version.h"

namespace convserve {
absl::StatusOr<std::shared_ptr<const Graph>> KServeService::FindModel(
    const std::string& name, const std::string& version) const {
  if (name.empty()) return absl::InvalidArgumentError("model name is required");
  if (!version.empty() && version != "1") {
    return absl::NotFoundError(
        absl::StrCat("model '", name, "' has no version '", version, "'; its only version is '1'"));
  }
  absl::StatusOr<std::shared_ptr<const Graph>> graph = core_->FindGraph(name);
  if (!graph.ok() && absl::IsNotFound(graph.status())) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded"));
  }
  return graph;
}

void KServeService::ServerLive(ServerCall* rpc, const inference::ServerLiveRequest*,
                               inference::ServerLiveResponse* response) {
  response->set_live(true);
  return FinishCall(rpc, absl::OkStatus());
}

void KServeService::ServerReady(ServerCall* rpc, const inference::ServerReadyRequest*,
                                inference::ServerReadyResponse* response) {
  // As Triton's strict readiness: not ready while a model is still loading
  // (a graph warming up). A FAILED warm-up does not hold the server back;
  // its model reports it.
  response->set_ready(core_->ready() && core_->warming_graphs() == 0);
  return FinishCall(rpc, absl::OkStatus());
}

void KServeService::ModelReady(ServerCall* rpc, const inference::ModelReadyRequest* request,
                               inference::ModelReadyResponse* response) {
  // An unknown model is "not ready", not an error, as in Triton.
  // A graph is ready once its warm-up ended well (docs/runtime.md, "Warm-up
  // at load"); it serves requests before that too.
  absl::StatusOr<std::shared_ptr<const Graph>> graph =
      FindModel(request->name(), request->version());
  response->set_ready(core_->ready() && graph.ok() &&
                      core_->WarmupOf((*graph)->id()).state == WarmupState::kReady);
  return FinishCall(rpc, absl::OkStatus());
}

void KServeService::ServerMetadata(ServerCall* rpc, const inference::ServerMetadataRequest*,
                                   inference::ServerMetadataResponse* response) {
  response->set_name("convserve");
  response->set_version(kConvServeVersion);
  // Triton's names for the extensions served here (README, "Triton
  // compatibility"); model_repository without loading from disk.
  response->add_extensions("model_configuration");
  response->add_extensions("statistics");
  response->add_extensions("model_repository");
  response->add_extensions("system_shared_memory");
  if (shared_memory_->serves_cuda()) response->add_extensions("cuda_shared_memory");
  return FinishCall(rpc, absl::OkStatus());
}

void KServeService::SystemSharedMemoryStatus(
    ServerCall* rpc, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  absl::StatusOr<std::vector<SharedMemoryRegistry::SystemRegion>> regions =
      shared_memory_->SystemStatus(request->name());
  if (!regions.ok()) return FinishCall(rpc, regions.status());
  for (const SharedMemoryRegistry::SystemRegion& region : *regions) {
    auto& status = (*response->mutable_regions())[region.name];
    status.set_name(region.name);
    status.set_key(region.key);
    status.set_offset(region.offset);
    status.set_byte_size(region.byte_size);
  }
  return FinishCall(rpc, absl::OkStatus());
}

void KServeService::SystemSharedMemoryRegister(
    ServerCall* rpc, const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  return FinishCall(rpc, shared_memory_->RegisterSystem(request->name(), request->key(),
                                                        request->offset(), request->byte_size()));
}

void KServeService::SystemSharedMemoryUnregister(
    ServerCall* rpc, const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  return FinishCall(rpc, shared_memory_->UnregisterSystem(request->name()));
}

void KServeService::CudaSharedMemoryStatus(ServerCall* rpc,
                                           const inference::CudaSharedMemoryStatusRequest* request,
                                           inference::CudaSharedMemoryStatusResponse* response) {
  absl::StatusOr<std::vector<SharedMemoryRegistry::CudaRegion>> regions =
      shared_memory_->CudaStatus(request->name());
  if (!regions.ok()) return FinishCall(rpc, regions.status());
  for (const SharedMemoryRegistry::CudaRegion& region : *regions) {
    auto& status = (*response->mutable_regions())[region.name];
    status.set_name(region.name);
    status.set_device_id(static_cast<uint64_t>(region.device));
    status.set_byte_size(region.byte_size);
  }
  return FinishCall(rpc, absl::OkStatus());
}

void KServeService::CudaSharedMemoryRegister(
    ServerCall* rpc, const inference::CudaSharedMemoryRegisterRequest* request,
    inference::CudaSharedMemoryRegisterResponse*) {
  return FinishCall(rpc, shared_memory_->RegisterCuda(request->name(), request->raw_handle(),
                                                      request->device_id(), request->byte_size()));
}

void KServeService::CudaSharedMemoryUnregister(
    ServerCall* rpc, const inference::CudaSharedMemoryUnregisterRequest* request,
    inference::CudaSharedMemoryUnregisterResponse*) {
  return FinishCall(rpc, shared_memory_->UnregisterCuda(request->name()));
}

void KServeService::ModelMetadata(ServerCall* rpc, const inference::ModelMetadataRequest* request,
                                  inference::ModelMetadataResponse* response) {
  absl::StatusOr<std::shared_ptr<const Graph>> graph =
      FindModel(request->name(), request->version());
  if (!graph.ok()) return FinishCall(rpc, graph.status());
  KServeMetadataToProto(**graph, response);
  return FinishCall(rpc, absl::OkStatus());
}

void KServeService::ModelInfer(ServerCall* rpc, const grpc::ByteBuffer* request_bytes,
                               grpc::ByteBuffer* response_bytes) {
  // The tensor goes from gRPC's slices into a host buffer once (page-locked
  // on GPU servers); the rest is parsed as usual.
  RequestRunner* runner = core_->mutable_runner();
  absl::StatusOr<WireInferRequest> wire = ParseModelInferRequest(
      *request_bytes, [runner](size_t bytes) { return runner->AllocateHostBuffer(bytes); });
  if (!wire.ok()) {
    metrics_->RequestRejected("", "kserve", wire.status().code(), 0);
    rpc->Finish(ToGrpcStatus(wire.status()));
    return;
  }
  // Alive until the call is done: the request (its raw inputs in buffers)
  // and the response header.
  struct Call {
    WireInferRequest wire;
    inference::ModelInferResponse response;
  };
  auto call = std::make_shared<Call>();
  call->wire = *std::move(wire);
  // True once the client cancels and also once the deadline passes, even if
  // the client never says so: gRPC's server deadline filter (on by default)
  // cancels the call. tests/integration/cancellation_test.cc checks both.
  StartInfer(
      call->wire.request, &call->wire.raw_inputs, &call->response,
      [rpc] { return rpc->IsCancelled(); },
      [rpc, response_bytes, call](const absl::Status& status, const TensorMemory* output) {
        if (!status.ok()) {
          rpc->Finish(ToGrpcStatus(status));
          return;
        }
        absl::StatusOr<grpc::ByteBuffer> bytes =
            SerializeModelInferResponse(call->response, output);
        if (!bytes.ok()) {
          rpc->Finish(ToGrpcStatus(bytes.status()));
          return;
        }
        *response_bytes = *std::move(bytes);
        rpc->Finish(grpc::Status::OK);
      });
  return;
}

void KServeService::Listen(CallQueue queue, int hot_calls, RequestExecutor* control) {
  using S = KServeAsyncService;
  KServeAsyncService* service = &async_;
  const auto add = [&](std::shared_ptr<const void> method) {
    methods_.push_back(std::move(method));
  };
  add(ListenUnary(service, &S::RequestModelInfer, this, &KServeService::ModelInfer, queue,
                  hot_calls));
  add(ListenUnary(service, &S::RequestServerLive, this, &KServeService::ServerLive, queue, 2));
  add(ListenUnary(service, &S::RequestServerReady, this, &KServeService::ServerReady, queue, 2));
  add(ListenUnary(service, &S::RequestModelReady, this, &KServeService::ModelReady, queue, 2));
  add(ListenUnary(service, &S::RequestServerMetadata, this, &KServeService::ServerMetadata, queue,
                  1));
  add(ListenUnary(service, &S::RequestModelMetadata, this, &KServeService::ModelMetadata, queue,
                  1));
  add(ListenUnary(service, &S::RequestSystemSharedMemoryStatus, this,
                  &KServeService::SystemSharedMemoryStatus, queue, 1));
  add(ListenUnary(service, &S::RequestSystemSharedMemoryRegister, this,
                  &KServeService::SystemSharedMemoryRegister, queue, 1, control));
  add(ListenUnary(service, &S::RequestSystemSharedMemoryUnregister, this,
                  &KServeService::SystemSharedMemoryUnregister, queue, 1, control));
  add(ListenUnary(service, &S::RequestCudaSharedMemoryStatus, this,
                  &KServeService::CudaSharedMemoryStatus, queue, 1));
  add(ListenUnary(service, &S::RequestCudaSharedMemoryRegister, this,
                  &KServeService::CudaSharedMemoryRegister, queue, 1, control));
  add(ListenUnary(service, &S::RequestCudaSharedMemoryUnregister, this,
                  &KServeService::CudaSharedMemoryUnregister, queue, 1, control));
  add(ListenUnary(service, &S::RequestModelConfig, this, &KServeService::ModelConfig, queue, 1));
  add(ListenUnary(service, &S::RequestModelStatistics, this, &KServeService::ModelStatistics, queue,
                  1));
  add(ListenUnary(service, &S::RequestRepositoryIndex, this, &KServeService::RepositoryIndex, queue,
                  1));
  add(ListenUnary(service, &S::RequestRepositoryModelLoad, this,
                  &KServeService::RepositoryModelLoad, queue, 1, control));
  add(ListenUnary(service, &S::RequestRepositoryModelUnload, this,
                  &KServeService::RepositoryModelUnload, queue, 1, control));
  add(ListenUnary(service, &S::RequestTraceSetting, this, &KServeService::TraceSetting, queue, 1));
  add(ListenUnary(service, &S::RequestLogSettings, this, &KServeService::LogSettings, queue, 1));
  for (int i = 0; i < 2; ++i) ModelStreamCall::Listen(service, this, queue);
}

void KServeService::StartInfer(const inference::ModelInferRequest& request,
                               inference::ModelInferResponse* response,
                               std::function<bool()> cancelled,
                               std::function<void(const absl::Status&)> done) {
  StartInfer(
      request, nullptr, response, std::move(cancelled),
      [done = std::move(done)](const absl::Status& status, const TensorMemory*) { done(status); });
}

void KServeService::StartInfer(const inference::ModelInferRequest& request,
                               const std::vector<TensorMemory>* raw_inputs,
                               inference::ModelInferResponse* response,
                               std::function<bool()> cancelled, BufferDone done) {
  const absl::Time start = absl::Now();
  const auto reject = [&](const absl::Status& status, const std::string& graph) {
    metrics_->RequestRejected(graph, "kserve", status.code(),
                              absl::ToDoubleSeconds(absl::Now() - start));
    done(status, nullptr);
  };
  absl::StatusOr<std::shared_ptr<const Graph>> graph =
      FindModel(request.model_name(), request.model_version());
  if (!graph.ok()) return reject(graph.status(), "");
  absl::StatusOr<std::optional<SharedMemoryRef>> output_region = CheckKServeOutputs(request);
  if (!output_region.ok()) return reject(output_region.status(), (*graph)->name());
  absl::StatusOr<WireTensor> input = KServeInputFromProto(**graph, request, raw_inputs);
  if (!input.ok()) return reject(input.status(), (*graph)->name());

  std::shared_ptr<const Graph> model = *graph;
  InferCall call;
  call.graph = model;
  call.input_shape = std::move(input->shape);
  call.input = input->bytes;
  if (input->shared_memory) {
    const SharedMemoryRef& ref = *input->shared_memory;
    absl::StatusOr<TensorMemory> memory =
        shared_memory_->Resolve(ref.region, ref.offset, ref.byte_size);
    if (!memory.ok()) return reject(memory.status(), model->name());
    if (memory->kind == TensorMemory::Kind::kHost) {
      call.input = absl::MakeConstSpan(memory->data, memory->bytes);
    }
    call.input_memory = *std::move(memory);
  }
  if (output_region->has_value()) {
    const SharedMemoryRef& ref = **output_region;
    absl::StatusOr<TensorMemory> memory =
        shared_memory_->Resolve(ref.region, ref.offset, ref.byte_size);
    if (!memory.ok()) return reject(memory.status(), model->name());
    call.output_memory = *std::move(memory);
  }
  response->set_model_name(model->name());
  response->set_model_version("1");
  response->set_id(request.id());
  // Raw inputs were read into page-locked buffers (on GPUs): copies to the
  // GPU read them directly.
  if (raw_inputs != nullptr && !raw_inputs->empty() && !call.input_memory) {
    call.input_memory = raw_inputs->front();
  }
  // Without an output region: into a host buffer that gRPC then sends as is
  // (the raw path), or into the response message.
  std::optional<TensorMemory> output_buffer;
  if (!call.output_memory && raw_inputs != nullptr) {
    absl::StatusOr<std::vector<Shape>> shapes = model->InferShapes(call.input_shape);
    if (shapes.ok()) {
      absl::StatusOr<TensorMemory> buffer = core_->mutable_runner()->AllocateHostBuffer(
          NumElements(shapes->back()) * DTypeSize(model->spec().dtype));
      if (!buffer.ok()) return reject(buffer.status(), model->name());
      output_buffer = *buffer;
      call.output_memory = *std::move(buffer);
    }
  }
  if (!call.output_memory) call.output = response->add_raw_output_contents();
  call.cancelled = std::move(cancelled);
  metrics_->RequestStarted();
  const int64_t bytes_in =
      static_cast<int64_t>(call.input_memory ? call.input_memory->bytes : call.input.size());
  call.done = [this, response, model, start, done = std::move(done), bytes_in,
               output_region = *output_region, output_buffer = std::move(output_buffer)](
                  const absl::Status& status, const Shape& shape, const InferTimings& timings) {
    int64_t bytes_out = 0;
    if (status.ok()) {
      auto* output = response->add_outputs();
      output->set_name(kOutputName);
      output->set_datatype(KServeDataType(model->spec().dtype));
      for (int64_t d : KServeShape(*model, shape)) output->add_shape(d);
      bytes_out = NumElements(shape) * static_cast<int64_t>(DTypeSize(model->spec().dtype));
      if (output_region) {
        // As Triton answers: the output's metadata, its bytes in the region,
        // and an empty raw_output_contents entry: Triton's clients (the C++
        // InferResultGrpc of perf_analyzer) read one entry per output without
        // checking, and crash on a response that has none.
        response->add_raw_output_contents();
        auto& parameters = *output->mutable_parameters();
        parameters["shared_memory_region"].set_string_param(output_region->region);
        parameters["shared_memory_byte_size"].set_int64_param(bytes_out);
        if (output_region->offset > 0) {
          parameters["shared_memory_offset"].set_int64_param(
              static_cast<int64_t>(output_region->offset));
        }
      }
    } else {
      const std::string id = response->id();
      response->Clear();  // never a partial result
      response->set_id(id);
    }
    metrics_->RequestFinished(model->name(), model->id(), "kserve", status.code(),
                              absl::ToDoubleSeconds(absl::Now() - start), timings, bytes_in,
                              bytes_out);
    if (status.ok() && output_buffer) {
      TensorMemory sent = *output_buffer;
      sent.bytes = static_cast<size_t>(bytes_out);
      done(status, &sent);
      return;
    }
    done(status, nullptr);
  };
  core_->Infer(std::move(call));
}

}  // namespace convserve
