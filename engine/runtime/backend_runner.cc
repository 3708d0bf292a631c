#include "engine/runtime/backend_runner.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/runtime/guarded_copy.h"
#include "engine/status_macros.h"
#include "spdlog/spdlog.h"

namespace convserve {

absl::StatusOr<std::shared_ptr<Executable>> BackendRunner::Compiled(
    const std::shared_ptr<const Graph>& graph, const Shape& input_shape) {
  PlanKey key;
  key.graph_id = graph->id();
  key.layer = -1;  // the whole graph
  key.input_shape = input_shape;
  key.dtype = graph->spec().dtype;
  key.layout = graph->spec().layout;
  key.device = -1;
  key.policy = backend_->name();
  return executables_.GetOrBuild(key, [&]() -> absl::StatusOr<PlanCache<Executable>::Built> {
    const absl::Time build_start = absl::Now();
    absl::StatusOr<std::shared_ptr<Executable>> compiled = backend_->Compile(graph, input_shape);
    PlanBuildEvent event;
    event.device = "cpu";
    event.path = backend_->name();
    event.ok = compiled.ok();
    event.seconds = absl::ToDoubleSeconds(absl::Now() - build_start);
    ReportPlanBuild(event);
    if (!compiled.ok()) return compiled.status();
    spdlog::info("plan built: graph '{}' input {} on {} in {:.2f} ms", graph->name(),
                 ShapeToString(input_shape), backend_->name(), event.seconds * 1e3);
    return PlanCache<Executable>::Built{*std::move(compiled), 0};
  });
}

absl::Status BackendRunner::Execute(const InferCall& call, Shape* output_shape,
                                    InferTimings* timings) {
  if (call.cancelled && call.cancelled()) {
    return absl::CancelledError(
        "the client cancelled or the deadline passed before the request ran");
  }
  absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<Executable> executable,
                   Compiled(call.graph, call.input_shape));
  timings->build = absl::ToDoubleSeconds(absl::Now() - start);
  const size_t bytes =
      NumElements(executable->output_shape()) * DTypeSize(call.graph->spec().dtype);
  const bool device_memory =
      (call.input_memory && call.input_memory->kind == TensorMemory::Kind::kDevice) ||
      (call.output_memory && call.output_memory->kind == TensorMemory::Kind::kDevice);
  if (device_memory) {
    return absl::FailedPreconditionError("CUDA shared memory needs the GPU backend");
  }
  // A client's region is only read and written by one guarded copy each
  // (guarded_copy.h): the layers run on pool threads, where a region
  // truncated under them would raise SIGBUS unguarded.
  const bool input_in_region = call.input_memory && call.input_memory->shared_region;
  const bool output_in_region = call.output_memory && call.output_memory->shared_region;
  std::vector<uint8_t> input_copy, output_copy;
  absl::Span<const uint8_t> input = call.input;
  if (input_in_region) {
    start = absl::Now();
    input_copy.resize(call.input.size());
    RETURN_IF_ERROR(CopyGuarded(input_copy.data(), call.input.data(), input_copy.size()));
    input = input_copy;
    timings->h2d = absl::ToDoubleSeconds(absl::Now() - start);
  }
  // Written in place: into the response message or a buffer of the server's.
  uint8_t* out = nullptr;
  if (call.output_memory) {
    if (call.output_memory->bytes != bytes) {
      return absl::InternalError("the output region's size does not match the output");
    }
    if (output_in_region) {
      output_copy.resize(bytes);
      out = output_copy.data();
    } else {
      out = call.output_memory->data;
    }
  } else {
    call.output->resize(bytes);
    out = reinterpret_cast<uint8_t*>(call.output->data());
  }
  start = absl::Now();
  absl::Status status = executable->Run(input, absl::MakeSpan(out, bytes), call.cancelled);
  timings->compute = absl::ToDoubleSeconds(absl::Now() - start);
  if (status.ok() && output_in_region) {
    start = absl::Now();
    status = CopyGuarded(call.output_memory->data, out, bytes);
    timings->d2h = absl::ToDoubleSeconds(absl::Now() - start);
  }
  if (!status.ok()) {
    if (call.output != nullptr) call.output->clear();  // never a partial result
    return status;
  }
  *output_shape = executable->output_shape();
  return absl::OkStatus();
}

namespace {

bool Cancelled(const InferCall& call) { return call.cancelled && call.cancelled(); }

// Why one call of a batch cannot take part in it, found before it runs:
// cancelled, or memory the CPU cannot use, or an output region of the wrong
// size. OK when it can.
absl::Status PartProblem(const InferCall& call) {
  if (Cancelled(call)) {
    return absl::CancelledError(
        "the client cancelled or the deadline passed before the request ran");
  }
  if ((call.input_memory && call.input_memory->kind == TensorMemory::Kind::kDevice) ||
      (call.output_memory && call.output_memory->kind == TensorMemory::Kind::kDevice)) {
    return absl::FailedPreconditionError("CUDA shared memory needs the GPU backend");
  }
  const size_t bytes = NumElements(call.layer_outputs.back()) * DTypeSize(call.graph->spec().dtype);
  if (call.output_memory && call.output_memory->bytes != bytes) {
    return absl::InternalError("the output region's size does not match the output");
  }
  return absl::OkStatus();
}

}  // namespace

void BackendRunner::RunAlone(InferCall& call, bool batched, InferTimings timings) {
  Shape output_shape;
  const absl::Status status = Execute(call, &output_shape, &timings);
  if (status.ok()) {
    timings.batch_size = batched ? call.input_shape[0] : 0;
    ExecutionEvent event;
    event.graph_name = call.graph->name();
    event.graph_id = call.graph->id();
    event.batched = batched;
    event.batch_size = call.input_shape[0];
    event.requests = 1;
    event.succeeded = 1;
    event.succeeded_batch = call.input_shape[0];
    event.timings = timings;
    ReportExecution(event);
  }
  call.done(status, output_shape, timings);
}

void BackendRunner::RunBatch(InferBatch& batch, double queue_seconds) {
  std::vector<InferTimings> timings(batch.calls.size());
  std::vector<size_t> live;
  for (size_t i = 0; i < batch.calls.size(); ++i) {
    timings[i].device = "cpu";
    timings[i].batch_delay = batch.delays[i];
    timings[i].queue = batch.delays[i] + queue_seconds;
    absl::Status problem = PartProblem(batch.calls[i]);
    if (problem.ok()) {
      live.push_back(i);
    } else {
      batch.calls[i].done(problem, {}, timings[i]);
    }
  }
  if (live.size() <= 1) {
    for (size_t i : live) RunAlone(batch.calls[i], true, timings[i]);
    return;
  }
  const InferCall& first = batch.calls[live.front()];
  const size_t element = DTypeSize(first.graph->spec().dtype);
  Shape input_shape = first.input_shape;
  input_shape[0] = 0;
  for (size_t i : live) input_shape[0] += batch.calls[i].input_shape[0];
  InferTimings shared;
  shared.device = "cpu";
  // Joined: every call's input into its slice (N is outermost in every
  // layout), one run, every call's slice of the output back out.
  absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<Executable>> executable = Compiled(first.graph, input_shape);
  shared.build = absl::ToDoubleSeconds(absl::Now() - start);
  absl::Status status = executable.status();
  const size_t in_bytes = NumElements(input_shape) * element;
  absl::StatusOr<TensorMemory> joined_in = AllocateHostBuffer(in_bytes);
  absl::StatusOr<TensorMemory> joined_out = absl::FailedPreconditionError("not allocated");
  if (status.ok()) status = joined_in.status();
  if (status.ok()) {
    joined_out = AllocateHostBuffer(NumElements((*executable)->output_shape()) * element);
    status = joined_out.status();
  }
  // Calls whose own copy in or out failed (a client's region truncated
  // under it): answered with that error; their slice is computed and dropped.
  std::vector<absl::Status> copied(batch.calls.size());
  if (status.ok()) {
    start = absl::Now();
    size_t offset = 0;
    for (size_t i : live) {
      const InferCall& call = batch.calls[i];
      const uint8_t* source = call.input_memory ? call.input_memory->data : call.input.data();
      const size_t bytes = NumElements(call.input_shape) * element;
      if (call.input_memory && call.input_memory->shared_region) {
        copied[i] = CopyGuarded(joined_in->data + offset, source, bytes);
      } else {
        std::memcpy(joined_in->data + offset, source, bytes);
      }
      offset += bytes;
    }
    shared.h2d = absl::ToDoubleSeconds(absl::Now() - start);
    // Stops early only when no call of the batch wants the result any more.
    const CancelCheck all_cancelled = [&] {
      for (size_t i : live) {
        if (!Cancelled(batch.calls[i])) return false;
      }
      return true;
    };
    start = absl::Now();
    status = (*executable)->Run(absl::MakeConstSpan(joined_in->data, joined_in->bytes),
                                absl::MakeSpan(joined_out->data, joined_out->bytes),
                                all_cancelled);
    shared.compute = absl::ToDoubleSeconds(absl::Now() - start);
  }
  if (!status.ok() && status.code() != absl::StatusCode::kCancelled) {
    // The joined run failed (e.g. no plan or no memory for the larger N):
    // each call runs alone, as it would have without batching.
    spdlog::warn("batch of {} requests (input {}) of graph '{}' failed: {}; running each alone",
                 live.size(), ShapeToString(input_shape), first.graph->name(),
                 status.ToString());
    for (size_t i : live) RunAlone(batch.calls[i], true, timings[i]);
    return;
  }
  if (!status.ok()) {
    for (size_t i : live) batch.calls[i].done(status, {}, timings[i]);
    return;
  }
  start = absl::Now();
  size_t offset = 0;
  for (size_t i : live) {
    InferCall& call = batch.calls[i];
    const Shape& output_shape = call.layer_outputs.back();
    const size_t bytes = NumElements(output_shape) * element;
    const uint8_t* slice = joined_out->data + offset;
    offset += bytes;
    if (!copied[i].ok()) continue;
    if (call.output_memory && call.output_memory->shared_region) {
      copied[i] = CopyGuarded(call.output_memory->data, slice, bytes);
    } else if (call.output_memory) {
      std::memcpy(call.output_memory->data, slice, bytes);
    } else {
      call.output->assign(reinterpret_cast<const char*>(slice), bytes);
    }
  }
  shared.d2h = absl::ToDoubleSeconds(absl::Now() - start);
  shared.batch_size = input_shape[0];
  ExecutionEvent event;
  event.graph_name = first.graph->name();
  event.graph_id = first.graph->id();
  event.batched = true;
  event.batch_size = input_shape[0];
  event.requests = static_cast<int>(live.size());
  for (size_t i : live) {
    if (!copied[i].ok()) continue;
    ++event.succeeded;
    event.succeeded_batch += batch.calls[i].input_shape[0];
  }
  event.timings = shared;
  if (event.succeeded > 0) ReportExecution(event);
  for (size_t i : live) {
    InferTimings t = shared;
    t.queue = timings[i].queue;
    t.batch_delay = timings[i].batch_delay;
    if (copied[i].ok()) {
      batch.calls[i].done(absl::OkStatus(), batch.calls[i].layer_outputs.back(), t);
    } else {
      t.batch_size = 0;
      batch.calls[i].done(copied[i], {}, t);
    }
  }
}

absl::Status BackendRunner::Warm(const std::shared_ptr<const Graph>& graph,
                                 const Shape& input_shape, const CancelCheck& cancelled) {
  if (cancelled && cancelled()) return absl::CancelledError("the warm-up was stopped");
  if (absl::StatusOr<std::vector<Shape>> outputs = graph->InferShapes(input_shape); !outputs.ok()) {
    return outputs.status();
  }
  absl::StatusOr<std::shared_ptr<Executable>> executable = Compiled(graph, input_shape);
  if (!executable.ok()) {
    return absl::Status(executable.status().code(),
                        absl::StrCat("on cpu: ", executable.status().message()));
  }
  return absl::OkStatus();
}

absl::Status BackendRunner::AddGraph(const std::shared_ptr<const Graph>& graph) {
  absl::MutexLock lock(&graphs_mu_);
  ++graph_refs_[graph->id()];
  return absl::OkStatus();
}

void BackendRunner::RemoveGraph(const std::string& graph_id) {
  {
    absl::MutexLock lock(&graphs_mu_);
    auto it = graph_refs_.find(graph_id);
    if (it == graph_refs_.end() || --it->second > 0) return;
    graph_refs_.erase(it);
  }
  executables_.EraseIf([&](const PlanKey& key) { return key.graph_id == graph_id; });
}

void BackendRunner::Submit(InferCall call) {
  auto shared_call = std::make_shared<InferCall>(std::move(call));
  const absl::Time accepted = absl::Now();
  absl::Status queued = executor_.Submit([this, shared_call, accepted] {
    InferTimings timings;
    timings.device = "cpu";
    timings.queue = absl::ToDoubleSeconds(absl::Now() - accepted);
    RunAlone(*shared_call, false, timings);
  });
  if (!queued.ok()) shared_call->done(queued, {}, {});
}

void BackendRunner::SubmitBatch(InferBatch batch) {
  auto shared_batch = std::make_shared<InferBatch>(std::move(batch));
  shared_batch->delays.resize(shared_batch->calls.size(), 0.0);
  const absl::Time accepted = absl::Now();
  absl::Status queued = executor_.Submit([this, shared_batch, accepted] {
    RunBatch(*shared_batch, absl::ToDoubleSeconds(absl::Now() - accepted));
  });
  if (!queued.ok()) {
    for (InferCall& call : shared_batch->calls) call.done(queued, {}, {});
  }
}

RunnerStats BackendRunner::Stats() const {
  RunnerStats stats;
  DeviceStats cpu;
  cpu.device = "cpu";
  const int pending = executor_.pending();
  cpu.running = std::min(pending, executor_.threads());
  cpu.queued = pending - cpu.running;
  stats.devices.push_back(cpu);
  stats.plans = executables_.stats();
  stats.versions["backend"] = backend_->name();
  return stats;
}

}  // namespace convserve
