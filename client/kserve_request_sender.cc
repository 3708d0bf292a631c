#include "client/kserve_request_sender.h"

#include <grpcpp/client_context.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/graph_file.h"
#include "client/model_infer_bytes.h"
#include "engine/graph.h"

namespace convserve {
namespace {

std::string KServeType(v1::DataType type) {
  return type == v1::FLOAT16 ? "FP16" : type == v1::BFLOAT16 ? "BF16" : "FP32";
}

void SetRegion(const std::string& region, uint64_t byte_size, uint64_t offset,
               google::protobuf::Map<std::string, inference::InferParameter>* parameters) {
  (*parameters)["shared_memory_region"].set_string_param(region);
  (*parameters)["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(byte_size));
  (*parameters)["shared_memory_offset"].set_int64_param(static_cast<int64_t>(offset));
}

// State of one unary ModelInfer call; deletes itself when the call ends.
struct UnaryCall {
  explicit UnaryCall(LiveCalls* calls) : hold(calls) {}

  // First: destroyed after the context.
  LiveCalls::Hold hold;
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  std::function<void(const absl::Status&, inference::ModelInferResponse*)> done;

  void Finish(const grpc::Status& status) {
    std::unique_ptr<UnaryCall> self(this);
    done(FromGrpcStatus(status), status.ok() ? &response : nullptr);
  }
};

// A response's output left in the received message (model_infer_bytes.h):
// reads copy it out of the received slices.
class ResponseBytesSlot final : public OutputSlot {
 public:
  ResponseBytesSlot(grpc::ByteBuffer buffer, ModelInferResponseBytes::Range range)
      : buffer_(std::move(buffer)), range_(range) {}

  absl::Status Read(int64_t bytes, std::string* out) const override {
    if (bytes != static_cast<int64_t>(range_.size)) {
      return absl::InternalError(absl::StrCat("asked for ", bytes, " bytes of an output of ",
                                              range_.size));
    }
    return CopyByteBufferRange(buffer_, range_, out);
  }

 private:
  const grpc::ByteBuffer buffer_;
  const ModelInferResponseBytes::Range range_;
};

// The output of a ModelInfer response received as bytes, left in them.
absl::StatusOr<InferOutput> OutputOfResponseBytes(grpc::ByteBuffer received) {
  absl::StatusOr<ModelInferResponseBytes> response =
      ParseModelInferResponseBytes(std::move(received));
  if (!response.ok()) return response.status();
  if (response->header.outputs_size() != 1 || response->raw_output_contents.size() != 1) {
    return absl::InternalError(absl::StrCat(
        "ModelInfer response has ", response->header.outputs_size(), " outputs and ",
        response->raw_output_contents.size(), " raw_output_contents; expected one of each"));
  }
  InferOutput output;
  output.shape.assign(response->header.outputs(0).shape().begin(),
                      response->header.outputs(0).shape().end());
  output.byte_size = static_cast<int64_t>(response->raw_output_contents[0].size);
  output.slot = std::make_unique<ResponseBytesSlot>(std::move(response->buffer),
                                                    response->raw_output_contents[0]);
  return output;
}

// State of one unary ModelInfer call with the tensors in the messages, sent
// and received as bytes; deletes itself when the call ends.
struct BytesCall {
  explicit BytesCall(LiveCalls* calls) : hold(calls) {}

  // First: destroyed after the context.
  LiveCalls::Hold hold;
  grpc::ClientContext context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  InferRequestSender::Done done;

  void Finish(const grpc::Status& status) {
    std::unique_ptr<BytesCall> self(this);
    if (!status.ok()) {
      done(FromGrpcStatus(status), nullptr);
      return;
    }
    absl::StatusOr<InferOutput> output = OutputOfResponseBytes(std::move(response));
    if (!output.ok()) {
      done(output.status(), nullptr);
      return;
    }
    done(absl::OkStatus(), &*output);
  }
};

}  // namespace

// A response's output slot: reads come from the regions, destruction hands
// the slot on.
class KServeRequestSender::Slot final : public OutputSlot {
 public:
  // `sender` outlives every output it delivers (destructor contract).
  Slot(KServeRequestSender* sender, int slot) : sender_(sender), slot_(slot) {}
  ~Slot() override { sender_->ReleaseSlot(slot_); }

  absl::Status Read(int64_t bytes, std::string* out) const override {
    return sender_->regions_->ReadOutput(slot_, bytes, out);
  }

 private:
  KServeRequestSender* const sender_;
  const int slot_;
};

absl::StatusOr<int64_t> OutputTensorBytes(const v1::GraphDef& graph,
                                          const std::vector<int64_t>& input_shape) {
  const auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("input shape does not fit graph '",
                                                   graph.name(), "': ", why));
  };
  if (input_shape.size() < 3) return invalid("it needs N, C and spatial dims");
  const int rank = static_cast<int>(input_shape.size()) - 2;
  std::vector<int64_t> spatial(input_shape.begin() + 2, input_shape.end());
  int64_t channels = input_shape[1];
  for (const v1::ConvLayer& layer : graph.layers()) {
    if (layer.kernel_size_size() != rank) {
      return invalid(absl::StrCat("layer '", layer.name(), "' has ", layer.kernel_size_size(),
                                  " kernel dims for ", rank, " spatial dims"));
    }
    const auto at = [](const google::protobuf::RepeatedField<int32_t>& values, int d,
                       int64_t fallback) -> int64_t {
      return d < values.size() ? values[d] : fallback;
    };
    for (int d = 0; d < rank; ++d) {
      spatial[d] = ConvOutputSize(spatial[d], layer.kernel_size(d), at(layer.stride(), d, 1),
                                  at(layer.dilation(), d, 1), at(layer.pad_before(), d, 0),
                                  at(layer.pad_after(), d, 0));
      if (spatial[d] < 1) {
        return invalid(absl::StrCat("layer '", layer.name(), "' leaves spatial dim ", d,
                                    " empty"));
      }
    }
    channels = layer.out_channels();
  }
  int64_t count = input_shape[0] * channels;
  for (int64_t d : spatial) count *= d;
  return count * ElementSize(graph.data_type());
}

absl::StatusOr<std::unique_ptr<KServeRequestSender>> KServeRequestSender::Create(
    const KServeSenderOptions& options, const InferInput& input,
    const std::vector<ConvServeClient*>& callers, const std::vector<ConvServeClient*>& servers) {
  std::unique_ptr<SharedMemoryTensors> regions;
  if (options.shared_memory != SharedMemoryKind::kNone) {
    absl::StatusOr<int64_t> output_bytes = OutputTensorBytes(input.definition, input.shape);
    if (!output_bytes.ok()) return output_bytes.status();
    SharedMemoryTensorsOptions region_options;
    region_options.kind = options.shared_memory;
    region_options.cuda_device = options.cuda_device;
    region_options.output_slots = options.output_slots;
    region_options.output_bytes = static_cast<uint64_t>(*output_bytes);
    absl::StatusOr<std::unique_ptr<SharedMemoryTensors>> created =
        SharedMemoryTensors::Create(region_options, input.bytes, servers);
    if (!created.ok()) return created.status();
    regions = *std::move(created);
  }
  std::unique_ptr<KServeRequestSender> sender(
      new KServeRequestSender(options, input, std::move(regions)));
  if (options.streaming) {
    for (ConvServeClient* client : callers) {
      sender->streams_[client] = std::make_unique<ModelInferStream>(client);
    }
  }
  return sender;
}

KServeRequestSender::KServeRequestSender(const KServeSenderOptions& options,
                                         const InferInput& input,
                                         std::unique_ptr<SharedMemoryTensors> regions)
    : options_(options), data_type_(input.definition.data_type()), regions_(std::move(regions)) {
  inference::ModelInferRequest request;
  request.set_model_name(input.definition.name());
  auto* tensor = request.add_inputs();
  tensor->set_name("input");
  tensor->set_datatype(KServeType(input.definition.data_type()));
  for (int64_t d : PhysicalDims(input.shape, input.definition.layout())) tensor->add_shape(d);
  if (regions_ == nullptr) {
    request.add_raw_input_contents(input.bytes);
    if (options_.streaming) {
      message_request_ = std::move(request);
    } else {
      message_bytes_ = std::make_unique<SerializedModelInferRequest>(request);
    }
    return;
  }
  SetRegion(regions_->input_region(), input.bytes.size(), 0, tensor->mutable_parameters());
  request.add_outputs()->set_name("output");
  for (int slot = 0; slot < regions_->slots(); ++slot) {
    SetRegion(regions_->output_region(), regions_->slot_bytes(), regions_->slot_offset(slot),
              request.mutable_outputs(0)->mutable_parameters());
    slot_requests_.push_back(request);
    free_slots_.push_back(regions_->slots() - 1 - slot);  // slot 0 is taken first
  }
}

KServeRequestSender::~KServeRequestSender() {
  // Before the members go: a closing stream may still complete requests,
  // whose callbacks use them.
  streams_.clear();
  live_calls_.AwaitNone();
}

std::string KServeRequestSender::transport() const {
  std::string calls = options_.streaming ? "ModelStreamInfer streams (one per connection)"
                                         : "unary ModelInfer";
  if (regions_ == nullptr) return absl::StrCat(calls, ", tensors in the messages");
  return absl::StrCat(calls, ", tensors in ", regions_->description(), " (", regions_->slots(),
                      regions_->slots() == 1 ? " output slot of " : " output slots of ",
                      regions_->slot_bytes(), " bytes)");
}

void KServeRequestSender::Call(ConvServeClient& client, int slot, absl::Time deadline,
                               bool blocking, CallDone done) {
  const inference::ModelInferRequest* request =
      slot < 0 ? &message_request_ : &slot_requests_[slot];
  if (options_.streaming) {
    streams_.at(&client)->Send(request, absl::StrCat(next_id_++), deadline, std::move(done));
    return;
  }
  auto* call = new UnaryCall(&live_calls_);
  call->done = std::move(done);
  call->context.set_deadline(absl::ToChronoTime(deadline));
  if (blocking) {
    call->Finish(client.ModelInferBlocking(&call->context, *request, &call->response));
    return;
  }
  client.ModelInferAsync(&call->context, request, &call->response,
                         [call](grpc::Status status) { call->Finish(status); });
}

void KServeRequestSender::SendAsync(ConvServeClient& client, Done done) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(options_.timeout);
  if (message_bytes_ != nullptr) {
    SendBytes(client, deadline, /*blocking=*/false, std::move(done));
    return;
  }
  if (regions_ == nullptr) {
    Dispatch(client, -1, deadline, /*blocking=*/false, std::move(done));
    return;
  }
  int slot = -1;
  {
    absl::MutexLock lock(&mu_);
    if (free_slots_.empty()) {
      waiting_.push_back(Waiting{&client, deadline, std::move(done)});
      return;
    }
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  Dispatch(client, slot, deadline, /*blocking=*/false, std::move(done));
}

void KServeRequestSender::SendBlocking(ConvServeClient& client, Done done) {
  if (options_.streaming) {
    InferRequestSender::SendBlocking(client, std::move(done));
    return;
  }
  const absl::Time deadline = absl::Now() + absl::FromChrono(options_.timeout);
  if (message_bytes_ != nullptr) {
    SendBytes(client, deadline, /*blocking=*/true, std::move(done));
    return;
  }
  int slot = -1;
  if (regions_ != nullptr) {
    bool free = false;
    {
      absl::MutexLock lock(&mu_);
      free = mu_.AwaitWithDeadline(absl::Condition(this, &KServeRequestSender::SlotFreeLocked),
                                   deadline);
      if (free) {
        slot = free_slots_.back();
        free_slots_.pop_back();
      }
    }
    if (!free) {
      done(absl::DeadlineExceededError(
               "waited past the deadline (--timeout) for a free shared-memory output slot"),
           nullptr);
      return;
    }
  }
  Dispatch(client, slot, deadline, /*blocking=*/true, std::move(done));
}

void KServeRequestSender::SendBytes(ConvServeClient& client, absl::Time deadline, bool blocking,
                                    Done done) {
  auto* call = new BytesCall(&live_calls_);
  call->done = std::move(done);
  call->context.set_deadline(absl::ToChronoTime(deadline));
  call->request = message_bytes_->Buffer();
  if (blocking) {
    call->Finish(client.ModelInferBytesBlocking(&call->context, call->request, &call->response));
    return;
  }
  client.ModelInferBytesAsync(&call->context, &call->request, &call->response,
                              [call](grpc::Status status) { call->Finish(status); });
}

void KServeRequestSender::Dispatch(ConvServeClient& client, int slot, absl::Time deadline,
                                   bool blocking, Done done) {
  Call(client, slot, deadline, blocking,
       [this, slot, done = std::move(done)](const absl::Status& status,
                                            inference::ModelInferResponse* response) {
         // Frees the slot when the output (or this callback) lets go of it.
         std::unique_ptr<OutputSlot> held;
         if (slot >= 0) held = std::make_unique<Slot>(this, slot);
         if (!status.ok()) {
           held.reset();
           done(status, nullptr);
           return;
         }
         if (response->outputs_size() != 1) {
           held.reset();
           done(absl::InternalError(absl::StrCat("ModelInfer response has ",
                                                 response->outputs_size(),
                                                 " outputs; expected one")),
                nullptr);
           return;
         }
         InferOutput output;
         output.shape.assign(response->outputs(0).shape().begin(),
                             response->outputs(0).shape().end());
         const int raw = response->raw_output_contents_size();
         if (slot < 0 && raw == 1) {
           output.bytes = std::move(*response->mutable_raw_output_contents(0));
           output.byte_size = static_cast<int64_t>(output.bytes.size());
         } else if (slot >= 0 && (raw == 0 || (raw == 1 && response->raw_output_contents(0).empty()))) {
           // In the slot (Triton's servers send an empty raw entry beside
           // it); as big as its shape says.
           output.byte_size = ElementSize(data_type_);
           for (int64_t d : output.shape) output.byte_size *= d;
           output.slot = std::move(held);
         } else {
           held.reset();
           done(absl::InternalError(absl::StrCat(
                    "ModelInfer response has ", raw, " raw_output_contents",
                    slot >= 0 ? " with bytes in them; expected the output in its region"
                              : "; expected 1")),
                nullptr);
           return;
         }
         held.reset();
         done(absl::OkStatus(), &output);
       });
}

void KServeRequestSender::ReleaseSlot(int slot) {
  for (;;) {
    Waiting next;
    {
      absl::MutexLock lock(&mu_);
      if (waiting_.empty()) {
        free_slots_.push_back(slot);
        return;
      }
      next = std::move(waiting_.front());
      waiting_.pop_front();
    }
    if (absl::Now() < next.deadline) {
      Dispatch(*next.client, slot, next.deadline, /*blocking=*/false, std::move(next.done));
      return;
    }
    next.done(absl::DeadlineExceededError(
                  "waited past the deadline (--timeout) for a free shared-memory output slot"),
              nullptr);
  }
}

}  // namespace convserve
