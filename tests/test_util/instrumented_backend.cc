#include "tests/test_util/instrumented_backend.h"

#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/cpu/cpu_backend.h"

namespace convserve {

struct InstrumentedBackend::State {
  explicit State(InstrumentedBackendOptions o) : options(std::move(o)) {}

  const InstrumentedBackendOptions options;
  std::atomic<int64_t> started{0};
  absl::Mutex mu;
  absl::Time stalled_until ABSL_GUARDED_BY(mu) = absl::InfinitePast();
};

namespace {

class InstrumentedExecutable : public Executable {
 public:
  InstrumentedExecutable(std::shared_ptr<Executable> inner, DType dtype,
                         std::shared_ptr<InstrumentedBackend::State> state)
      : inner_(std::move(inner)), dtype_(dtype), state_(std::move(state)) {}

  const Shape& input_shape() const override { return inner_->input_shape(); }
  const Shape& output_shape() const override { return inner_->output_shape(); }

  using Executable::Run;
  absl::Status Run(absl::Span<const uint8_t> input, absl::Span<uint8_t> output,
                   const CancelCheck& cancelled) override {
    RunLog& log = *state_->options.log;
    const absl::Time start = absl::Now();
    log.Started();
    absl::Status status = RunInstrumented(input, output, cancelled);
    log.Ended({start, absl::Now(), status});
    return status;
  }

 private:
  absl::Status RunInstrumented(absl::Span<const uint8_t> input, absl::Span<uint8_t> output,
                               const CancelCheck& cancelled) {
    const InstrumentedBackendOptions& options = state_->options;
    const int64_t index = state_->started.fetch_add(1);
    absl::Time until;
    {
      absl::MutexLock lock(&state_->mu);
      if (index == options.stall_at_run) state_->stalled_until = absl::Now() + options.stall;
      until = state_->stalled_until;
    }
    // The injected fault itself: this run (and any during the stall) is held
    // until the stall ends.
    if (options.fail_every > 0 && (index + 1) % options.fail_every == 0) {
      return absl::InternalError("injected failure (InstrumentedBackend fail_every)");
    }
    const absl::Time now = absl::Now();
    if (now < until) absl::SleepFor(until - now);
    absl::Status status = inner_->Run(input, output, cancelled);
    if (!status.ok()) return status;
    if (options.output_scale != 1.0f) {
      const size_t count = output.size() / DTypeSize(dtype_);
      std::vector<float> values(count);
      ToFloat(dtype_, output.data(), values.data(), count);
      for (float& v : values) v *= options.output_scale;
      FromFloat(dtype_, values.data(), output.data(), count);
    }
    options.runs->fetch_add(1);
    return absl::OkStatus();
  }

  const std::shared_ptr<Executable> inner_;
  const DType dtype_;
  const std::shared_ptr<InstrumentedBackend::State> state_;
};

}  // namespace

void RunLog::Started() {
  absl::MutexLock lock(&mu_);
  ++started_;
}

void RunLog::Ended(Run run) {
  absl::MutexLock lock(&mu_);
  ended_.push_back(std::move(run));
}

bool RunLog::AwaitStarted(int runs, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const auto enough = [this, runs]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return started_ >= runs; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

bool RunLog::AwaitEnded(int runs, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const auto enough = [this, runs]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(ended_.size()) >= runs;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

int RunLog::started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

std::vector<RunLog::Run> RunLog::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

InstrumentedBackend::InstrumentedBackend(std::unique_ptr<Backend> inner,
                                         InstrumentedBackendOptions options)
    : inner_(std::move(inner)), state_(std::make_shared<State>(std::move(options))) {}

InstrumentedBackend::~InstrumentedBackend() = default;

std::unique_ptr<InstrumentedBackend> InstrumentedBackend::AroundCpu(
    InstrumentedBackendOptions options) {
  return std::make_unique<InstrumentedBackend>(*CpuBackend::Create({2}), std::move(options));
}

std::string InstrumentedBackend::name() const { return inner_->name(); }

std::string InstrumentedBackend::Describe() const { return "instrumented " + inner_->Describe(); }

absl::StatusOr<std::shared_ptr<Executable>> InstrumentedBackend::Compile(
    std::shared_ptr<const Graph> graph, const Shape& input_shape) {
  const DType dtype = graph->spec().dtype;
  absl::StatusOr<std::shared_ptr<Executable>> inner =
      inner_->Compile(std::move(graph), input_shape);
  if (!inner.ok()) return inner.status();
  return std::shared_ptr<Executable>(
      std::make_shared<InstrumentedExecutable>(*std::move(inner), dtype, state_));
}

}  // namespace convserve
