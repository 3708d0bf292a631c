#include "server/inference_core.h"

#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"

namespace convserve {

absl::StatusOr<std::unique_ptr<InferenceCore>> InferenceCore::Create(
    const InferenceCoreOptions& options, std::unique_ptr<Backend> backend) {
  if (backend == nullptr) return absl::InvalidArgumentError("InferenceCore needs a backend");
  if (options.executor.threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("request threads must be >= 1, got ",
                                                   options.executor.threads));
  }
  if (options.executor.max_queued < 1) {
    return absl::InvalidArgumentError(absl::StrCat("the request queue must hold >= 1, got ",
                                                   options.executor.max_queued));
  }
  return std::unique_ptr<InferenceCore>(new InferenceCore(options, std::move(backend)));
}

InferenceCore::InferenceCore(const InferenceCoreOptions& options,
                             std::unique_ptr<Backend> backend)
    : options_(options),
      backend_(std::move(backend)),
      registry_(options.registry),
      executor_(options.executor) {}

absl::StatusOr<GraphRegistry::AddResult> InferenceCore::LoadGraph(GraphSpec spec) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Graph> graph,
                   Graph::Create(std::move(spec), options_.graph_limits));
  return registry_.Add(std::move(graph));
}

absl::Status InferenceCore::UnloadGraph(const std::string& name_or_id) {
  return registry_.Remove(name_or_id);
}

absl::StatusOr<std::shared_ptr<const Graph>> InferenceCore::FindGraph(
    const std::string& name_or_id) const {
  return registry_.Find(name_or_id);
}

std::vector<std::shared_ptr<const Graph>> InferenceCore::ListGraphs() const {
  return registry_.List();
}

void InferenceCore::Infer(InferCall call) {
  // Shape errors are the caller's and are answered before anything queues.
  absl::StatusOr<std::vector<Shape>> shapes = call.graph->InferShapes(call.input_shape);
  if (!shapes.ok()) {
    call.done(shapes.status(), {});
    return;
  }
  const size_t element = DTypeSize(call.graph->spec().dtype);
  const size_t expected = NumElements(call.input_shape) * element;
  if (call.input.size() != expected) {
    call.done(absl::InvalidArgumentError(absl::StrCat(
                  "input data holds ", call.input.size(), " bytes; shape ",
                  ShapeToString(call.input_shape), " of ", DTypeName(call.graph->spec().dtype),
                  " needs ", expected)),
              {});
    return;
  }
  if (!ready_.load()) {
    call.done(absl::UnavailableError("the server is shutting down"), {});
    return;
  }
  auto shared_call = std::make_shared<InferCall>(std::move(call));
  absl::Status queued = executor_.Submit([this, shared_call] {
    Shape output_shape;
    absl::Status status = Execute(*shared_call, &output_shape);
    shared_call->done(status, output_shape);
  });
  if (!queued.ok()) shared_call->done(queued, {});
}

absl::Status InferenceCore::Execute(const InferCall& call, Shape* output_shape) {
  if (call.cancelled && call.cancelled()) {
    return absl::CancelledError("the client cancelled or the deadline passed before the "
                                "request ran");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Executable> executable,
                   backend_->Compile(call.graph, call.input_shape));
  const size_t bytes =
      NumElements(executable->output_shape()) * DTypeSize(call.graph->spec().dtype);
  call.output->resize(bytes);
  absl::Status status = executable->Run(
      call.input, absl::MakeSpan(reinterpret_cast<uint8_t*>(call.output->data()), bytes));
  if (!status.ok()) {
    call.output->clear();  // never a partial result
    return status;
  }
  *output_shape = executable->output_shape();
  return absl::OkStatus();
}

void InferenceCore::Drain() {
  ready_.store(false);
  executor_.Drain();
}

}  // namespace convserve
