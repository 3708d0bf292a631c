#include "engine/runtime/backend_runner.h"

#include <vector>

#include "absl/time/clock.h"
#include "engine/runtime/guarded_copy.h"
#include "engine/status_macros.h"
#include "spdlog/spdlog.h"

namespace convserve {

absl::Status BackendRunner::Execute(const InferCall& call, Shape* output_shape,
                                    InferTimings* timings) {
  if (call.cancelled && call.cancelled()) {
    return absl::CancelledError(
        "the client cancelled or the deadline passed before the request ran");
  }
  absl::Time start = absl::Now();
  PlanKey key;
  key.graph_id = call.graph->id();
  key.layer = -1;  // the whole graph
  key.input_shape = call.input_shape;
  key.dtype = call.graph->spec().dtype;
  key.layout = call.graph->spec().layout;
  key.device = -1;
  key.policy = backend_->name();
  ASSIGN_OR_RETURN(
      std::shared_ptr<Executable> executable,
      executables_.GetOrBuild(key, [&]() -> absl::StatusOr<PlanCache<Executable>::Built> {
        const absl::Time build_start = absl::Now();
        absl::StatusOr<std::shared_ptr<Executable>> compiled =
            backend_->Compile(call.graph, call.input_shape);
        PlanBuildEvent event;
        event.device = "cpu";
        event.path = backend_->name();
        event.ok = compiled.ok();
        event.seconds = absl::ToDoubleSeconds(absl::Now() - build_start);
        ReportPlanBuild(event);
        if (!compiled.ok()) return compiled.status();
        spdlog::info("plan built: graph '{}' input {} on {} in {:.2f} ms", call.graph->name(),
                     ShapeToString(call.input_shape), backend_->name(), event.seconds * 1e3);
        return PlanCache<Executable>::Built{*std::move(compiled), 0};
      }));
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

void BackendRunner::RemoveGraph(const std::string& graph_id) {
  executables_.EraseIf([&](const PlanKey& key) { return key.graph_id == graph_id; });
}

void BackendRunner::Submit(InferCall call) {
  auto shared_call = std::make_shared<InferCall>(std::move(call));
  const absl::Time accepted = absl::Now();
  absl::Status queued = executor_.Submit([this, shared_call, accepted] {
    InferTimings timings;
    timings.device = "cpu";
    timings.queue = absl::ToDoubleSeconds(absl::Now() - accepted);
    Shape output_shape;
    absl::Status status = Execute(*shared_call, &output_shape, &timings);
    shared_call->done(status, output_shape, timings);
  });
  if (!queued.ok()) shared_call->done(queued, {}, {});
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
