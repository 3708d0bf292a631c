#include "tests/test_util/gated_backend.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"

namespace convserve {
namespace {

class GatedExecutable : public Executable {
 public:
  GatedExecutable(std::shared_ptr<Executable> inner, std::shared_ptr<BackendGate> gate)
      : inner_(std::move(inner)), gate_(std::move(gate)) {}

  const Shape& input_shape() const override { return inner_->input_shape(); }
  const Shape& output_shape() const override { return inner_->output_shape(); }
  using Executable::Run;
  absl::Status Run(absl::Span<const uint8_t> input, absl::Span<uint8_t> output,
                   const CancelCheck& cancelled) override {
    gate_->Pass();
    return inner_->Run(input, output, cancelled);
  }

 private:
  const std::shared_ptr<Executable> inner_;
  const std::shared_ptr<BackendGate> gate_;
};

}  // namespace

void BackendGate::Pass() {
  absl::MutexLock lock(&mu_);
  ++held_;
  mu_.Await(absl::Condition(&open_));
  --held_;
  ++passed_;
}

void BackendGate::Open() {
  absl::MutexLock lock(&mu_);
  open_ = true;
}

bool BackendGate::AwaitHeld(int calls, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const auto enough = [this, calls]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_ >= calls; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

int BackendGate::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

int BackendGate::passed() const {
  absl::MutexLock lock(&mu_);
  return passed_;
}

GatedBackend::GatedBackend(std::unique_ptr<Backend> inner, GatedBackendOptions options)
    : inner_(std::move(inner)), options_(std::move(options)) {}

std::unique_ptr<GatedBackend> GatedBackend::AroundCpu(GatedBackendOptions options) {
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create({2});
  if (!cpu.ok()) std::abort();  // 2 threads is always a valid CPU backend
  return std::make_unique<GatedBackend>(*std::move(cpu), std::move(options));
}

std::string GatedBackend::Describe() const {
  return absl::StrCat(inner_->Describe(), " (held at test gates)");
}

absl::StatusOr<std::shared_ptr<Executable>> GatedBackend::Compile(
    std::shared_ptr<const Graph> graph, const Shape& input_shape) {
  if (options_.compile != nullptr) options_.compile->Pass();
  const bool gated = options_.run != nullptr &&
                     (options_.run_only_graph.empty() || graph->name() == options_.run_only_graph);
  absl::StatusOr<std::shared_ptr<Executable>> inner =
      inner_->Compile(std::move(graph), input_shape);
  if (!inner.ok() || !gated) return inner;
  return std::make_shared<GatedExecutable>(*std::move(inner), options_.run);
}

}  // namespace convserve
