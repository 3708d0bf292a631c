#include "engine/runtime/backend_runner.h"

#include "absl/time/clock.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

absl::Status Execute(Backend& backend, const InferCall& call, Shape* output_shape,
                     InferTimings* timings) {
  if (call.cancelled && call.cancelled()) {
    return absl::CancelledError(
        "the client cancelled or the deadline passed before the request ran");
  }
  absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<Executable> executable,
                   backend.Compile(call.graph, call.input_shape));
  timings->build = absl::ToDoubleSeconds(absl::Now() - start);
  const size_t bytes =
      NumElements(executable->output_shape()) * DTypeSize(call.graph->spec().dtype);
  call.output->resize(bytes);
  start = absl::Now();
  absl::Status status = executable->Run(
      call.input, absl::MakeSpan(reinterpret_cast<uint8_t*>(call.output->data()), bytes));
  timings->compute = absl::ToDoubleSeconds(absl::Now() - start);
  if (!status.ok()) {
    call.output->clear();  // never a partial result
    return status;
  }
  *output_shape = executable->output_shape();
  return absl::OkStatus();
}

}  // namespace

void BackendRunner::Submit(InferCall call) {
  auto shared_call = std::make_shared<InferCall>(std::move(call));
  const absl::Time accepted = absl::Now();
  absl::Status queued = executor_.Submit([this, shared_call, accepted] {
    InferTimings timings;
    timings.queue = absl::ToDoubleSeconds(absl::Now() - accepted);
    Shape output_shape;
    absl::Status status = Execute(*backend_, *shared_call, &output_shape, &timings);
    shared_call->done(status, output_shape, timings);
  });
  if (!queued.ok()) shared_call->done(queued, {}, {});
}

}  // namespace convserve
