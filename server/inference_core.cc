#include "server/inference_core.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/compute_cost.h"
#include "engine/runtime/backend_runner.h"
#include "engine/status_macros.h"
#include "spdlog/spdlog.h"

namespace convserve {

absl::StatusOr<std::unique_ptr<InferenceCore>> InferenceCore::Create(
    const InferenceCoreOptions& options, std::unique_ptr<RequestRunner> runner) {
  if (runner == nullptr) return absl::InvalidArgumentError("InferenceCore needs a runner");
  return std::unique_ptr<InferenceCore>(new InferenceCore(options, std::move(runner)));
}

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
  return Create(options, std::make_unique<BackendRunner>(std::move(backend), options.executor));
}

namespace {

bool SameBatching(const DynamicBatchingOptions& a, const DynamicBatchingOptions& b) {
  std::vector<int64_t> preferred_a = a.preferred_batch_sizes;
  std::vector<int64_t> preferred_b = b.preferred_batch_sizes;
  std::sort(preferred_a.begin(), preferred_a.end());
  std::sort(preferred_b.begin(), preferred_b.end());
  if (a.max_batch_size == 0 && b.max_batch_size == 0) return true;  // off either way
  return a.max_batch_size == b.max_batch_size && a.max_queue_delay == b.max_queue_delay &&
         preferred_a == preferred_b && a.dispatch_when_idle == b.dispatch_when_idle;
}

std::string DescribeBatching(const DynamicBatchingOptions& b) {
  if (b.max_batch_size == 0) return "no dynamic batching";
  return absl::StrCat("dynamic batching up to ", b.max_batch_size, ", max queue delay ",
                      absl::ToInt64Microseconds(b.max_queue_delay), " us",
                      b.preferred_batch_sizes.empty()
                          ? ""
                          : absl::StrCat(", preferred ",
                                         absl::StrJoin(b.preferred_batch_sizes, ",")),
                      b.dispatch_when_idle ? "" : ", the delay waited out when idle");
}

// Warm-up shapes one LoadGraph may name: each costs a plan per layer on
// every worker of every GPU (and an engine search on a fresh store).
constexpr size_t kMaxWarmupShapes = 64;

}  // namespace

absl::StatusOr<std::vector<Shape>> InferenceCore::WarmupShapes(
    const Graph& graph, const WarmupRequest& warmup,
    const DynamicBatchingOptions& batching) const {
  if (warmup.disabled) {
    if (!warmup.shapes.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "warmup of graph '", graph.name(), "' is disabled but names ", warmup.shapes.size(),
          " shape(s): drop warmup.disabled or warmup.shapes"));
    }
    return std::vector<Shape>();
  }
  if (warmup.shapes.size() > kMaxWarmupShapes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "warmup of graph '", graph.name(), "' names ", warmup.shapes.size(),
        " shapes; at most ", kMaxWarmupShapes, " are warmed up at load (the others build their "
        "plans on first use)"));
  }
  std::vector<Shape> inputs;
  // Server defaults that do not fit this graph: the warm-up reports them
  // (the graph turns FAILED), the LoadGraph is not refused for the server's
  // setting.
  std::vector<Shape> unfit;
  const size_t rank = static_cast<size_t>(graph.spatial_rank());
  for (size_t i = 0; i < warmup.shapes.size(); ++i) {
    const Shape& shape = warmup.shapes[i];
    const std::string what =
        absl::StrCat("warmup.shapes[", i, "] ", ShapeToString(shape), " of graph '", graph.name(),
                     "'");
    if (shape.size() != rank + 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " has ", shape.size(), " dims; the graph takes ", rank + 2,
          rank == 2 ? " (N, C, H, W" : " (N, C, D, H, W", ", logical whatever the layout)"));
    }
    if (shape[1] != graph.spec().input_channels) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has C=", shape[1],
                                                     "; the graph's input_channels is ",
                                                     graph.spec().input_channels));
    }
    absl::StatusOr<std::vector<Shape>> outputs = graph.InferShapes(shape);
    absl::Status fits = outputs.status();
    if (fits.ok()) {
      fits = CheckRequestFlops(graph, shape, RequestFlops(graph, *outputs),
                               options_.max_request_flops);
    }
    if (!fits.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", fits.message()));
    }
    inputs.push_back(shape);
  }
  if (warmup.shapes.empty()) {
    for (const WarmupSize& size : options_.default_warmup) {
      absl::StatusOr<Shape> shape = WarmupInputShape(graph, size);
      if (!shape.ok()) continue;  // a size for graphs of another spatial rank
      (graph.InferShapes(*shape).ok() ? inputs : unfit).push_back(*std::move(shape));
    }
  }
  std::vector<Shape> shapes = WarmupExecutionShapes(inputs, batching);
  shapes.insert(shapes.end(), unfit.begin(), unfit.end());
  return shapes;
}

absl::StatusOr<GraphRegistry::AddResult> InferenceCore::LoadGraph(
    GraphSpec spec, std::optional<DynamicBatchingOptions> requested,
    const WarmupRequest& warmup) {
  if (!ready_.load()) {
    return absl::UnavailableError(
        absl::StrCat("the server is shutting down: graph '", spec.name, "' was not loaded"));
  }
  const DynamicBatchingOptions batching = requested.value_or(options_.default_batching);
  absl::Status valid = ValidateDynamicBatching(batching);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dynamic_batching of graph '", spec.name, "': ", valid.message()));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const Graph> graph,
                   Graph::Create(std::move(spec), options_.graph_limits));
  ASSIGN_OR_RETURN(const std::vector<Shape> warmup_shapes,
                   WarmupShapes(*graph, warmup, batching));
  // Warms up the graph as registered (after the checks below), and waits
  // when asked to.
  const auto warm_up = [&](absl::StatusOr<GraphRegistry::AddResult> added)
      -> absl::StatusOr<GraphRegistry::AddResult> {
    if (!added.ok() || warmup_shapes.empty()) return added;
    warmups_.Start(added->graph, warmup_shapes);
    if (!warmup.wait) return added;
    absl::StatusOr<WarmupStatus> warmed = warmups_.Wait(added->graph->id());
    if (!warmed.ok()) return warmed.status();
    return added;
  };
  // Prepare first (weights to every GPU), so a graph is never listed before
  // it can run; the runner counts references, so an identical graph loaded
  // twice, or a refused one, just releases its extra reference.
  absl::Status prepared = runner_->AddGraph(graph);
  if (!prepared.ok()) {
    spdlog::warn("graph '{}' not loaded: {}", graph->name(), prepared.ToString());
    return prepared;
  }
  absl::StatusOr<GraphRegistry::AddResult> added = registry_.Add(graph);
  if (!added.ok() || added->already_loaded) runner_->RemoveGraph(graph->id());
  if (!added.ok()) {
    spdlog::warn("graph '{}' not loaded: {}", graph->name(), added.status().ToString());
    return added;
  }
  if (added->already_loaded) {
    const DynamicBatchingOptions current =
        Batching(graph->id()).value_or(DynamicBatchingOptions());
    if (!SameBatching(current, batching)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "graph '", graph->name(), "' is loaded with ", DescribeBatching(current),
          "; this LoadGraph asks for ", DescribeBatching(batching),
          ": unload it first to change its batching"));
    }
    return warm_up(std::move(added));
  }
  if (batching.max_batch_size > 0) {
    absl::StatusOr<std::unique_ptr<DynamicBatcher>> batcher =
        DynamicBatcher::Create(batching, runner_.get(), graph->name());
    if (!batcher.ok()) {
      registry_.Remove(graph->id()).IgnoreError();
      runner_->RemoveGraph(graph->id());
      return batcher.status();
    }
    absl::MutexLock lock(&batchers_mu_);
    batchers_[graph->id()] = *std::move(batcher);
  }
  spdlog::info("graph loaded: '{}' id {}, {} layers, {} parameter bytes, {}", graph->name(),
               graph->id(), graph->spec().layers.size(), graph->parameter_bytes(),
               DescribeBatching(batching));
  return warm_up(std::move(added));
}

std::optional<DynamicBatchingOptions> InferenceCore::Batching(const std::string& graph_id) const {
  absl::MutexLock lock(&batchers_mu_);
  auto it = batchers_.find(graph_id);
  if (it == batchers_.end()) return std::nullopt;
  return it->second->options();
}

void InferenceCore::WhenWarmedUp(const std::shared_ptr<const Graph>& graph,
                                 GraphWarmups::EndCallback done) {
  warmups_.WhenEnded(graph->id(), [this, graph, done = std::move(done)](
                                      absl::StatusOr<WarmupStatus> ended) {
    // An unload that came first left no warm-up to wait for.
    absl::StatusOr<std::shared_ptr<const Graph>> now = FindGraph(graph->id());
    if (ended.ok() && (!now.ok() || now->get() != graph.get())) {
      ended = absl::AbortedError(
          absl::StrCat("graph '", graph->name(), "' was unloaded during its warm-up"));
    }
    done(std::move(ended));
  });
}

absl::Status InferenceCore::UnloadGraph(const std::string& name_or_id) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Graph> graph, registry_.Find(name_or_id));
  RETURN_IF_ERROR(registry_.Remove(graph->id()));
  std::shared_ptr<DynamicBatcher> batcher;
  {
    absl::MutexLock lock(&batchers_mu_);
    auto it = batchers_.find(graph->id());
    if (it != batchers_.end()) {
      batcher = std::move(it->second);
      batchers_.erase(it);
    }
  }
  // Requests waiting for batch-mates go to the runner before it drops the
  // graph, so they run as requests already queued do.
  if (batcher != nullptr) batcher->Close();
  // Its warm-up stops first, so no plan of the graph is built after the
  // runner drops them.
  warmups_.Remove(graph->id());
  runner_->RemoveGraph(graph->id());
  spdlog::info("graph unloaded: '{}' id {}", graph->name(), graph->id());
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Graph>> InferenceCore::FindGraph(
    const std::string& name_or_id) const {
  return registry_.Find(name_or_id);
}

std::vector<std::shared_ptr<const Graph>> InferenceCore::ListGraphs() const {
  return registry_.List();
}

int InferenceCore::WaitingToBatch(const std::string& graph_id) const {
  std::shared_ptr<DynamicBatcher> batcher;
  {
    absl::MutexLock lock(&batchers_mu_);
    auto it = batchers_.find(graph_id);
    if (it == batchers_.end()) return 0;
    batcher = it->second;
  }
  return batcher->queued();
}

void InferenceCore::Infer(InferCall call) {
  // Shape errors are the caller's and are answered before anything queues.
  absl::StatusOr<std::vector<Shape>> shapes = call.graph->InferShapes(call.input_shape);
  if (!shapes.ok()) {
    call.done(shapes.status(), {}, {});
    return;
  }
  call.layer_outputs = *std::move(shapes);
  absl::Status affordable =
      CheckRequestFlops(*call.graph, call.input_shape,
                        RequestFlops(*call.graph, call.layer_outputs), options_.max_request_flops);
  if (!affordable.ok()) {
    call.done(affordable, {}, {});
    return;
  }
  const size_t element = DTypeSize(call.graph->spec().dtype);
  const size_t expected = NumElements(call.input_shape) * element;
  const size_t given = call.input_memory ? call.input_memory->bytes : call.input.size();
  if (given != expected) {
    // Named as the client wrote it: shared_memory_byte_size when the input
    // is in a region (the request carries no bytes to count there).
    const std::string what =
        call.input_memory && call.input_memory->shared_region
            ? absl::StrCat("the input's shared memory holds ", given,
                           " bytes (shared_memory_byte_size)")
            : absl::StrCat("input data holds ", given, " bytes");
    call.done(absl::InvalidArgumentError(absl::StrCat(
                  what, "; shape ", ShapeToString(call.input_shape), " of ",
                  DTypeName(call.graph->spec().dtype), " needs ", expected)),
              {}, {});
    return;
  }
  if (call.output_memory) {
    // A region at least as large as the output takes it (as in Triton).
    const size_t needed = NumElements(call.layer_outputs.back()) * element;
    if (call.output_memory->bytes < needed) {
      call.done(absl::InvalidArgumentError(absl::StrCat(
                    "the output's shared memory holds ", call.output_memory->bytes,
                    " bytes (shared_memory_byte_size); output ",
                    ShapeToString(call.layer_outputs.back()), " of ",
                    DTypeName(call.graph->spec().dtype), " needs ", needed)),
                {}, {});
      return;
    }
    call.output_memory->bytes = needed;
  }
  absl::ReaderMutexLock lock(&drain_mu_);
  if (!ready_.load()) {
    call.done(absl::UnavailableError("the server is shutting down"), {}, {});
    return;
  }
  ++accepted_;
  call.done = [this, done = std::move(call.done), name = call.graph->name()](
                  const absl::Status& status, const Shape& shape, const InferTimings& timings) {
    // Failures after acceptance are logged (the caller's own mistakes were
    // answered before this point and are only counted). Overload and
    // shutdown refusals are expected under load: debug only, so a burst
    // cannot flood the log.
    if (!status.ok()) {
      const bool expected = status.code() == absl::StatusCode::kCancelled ||
                            status.code() == absl::StatusCode::kResourceExhausted ||
                            status.code() == absl::StatusCode::kUnavailable;
      spdlog::log(expected ? spdlog::level::debug : spdlog::level::warn,
                  "request for graph '{}' failed: {}", name, status.ToString());
    }
    done(status, shape, timings);
    ++answered_;
  };
  std::shared_ptr<DynamicBatcher> batcher;
  {
    absl::MutexLock lock(&batchers_mu_);
    auto it = batchers_.find(call.graph->id());
    if (it != batchers_.end()) batcher = it->second;
  }
  if (batcher != nullptr) {
    batcher->Submit(std::move(call));
  } else {
    runner_->Submit(std::move(call));
  }
}

void InferenceCore::Drain() {
  {
    absl::MutexLock lock(&drain_mu_);
    ready_.store(false);
  }
  // Requests waiting for batch-mates are handed to the runner now; then the
  // runner finishes everything it accepted.
  std::vector<std::shared_ptr<DynamicBatcher>> batchers;
  {
    absl::MutexLock lock(&batchers_mu_);
    for (const auto& [id, batcher] : batchers_) batchers.push_back(batcher);
  }
  for (const auto& batcher : batchers) batcher->Close();
  // Warm-ups stop after the plan each is building (the runner's drain
  // cancels engine searches); LoadGraphs waiting for one are answered.
  warmups_.Stop();
  runner_->Drain();
  warmups_.Join();
}

}  // namespace convserve
