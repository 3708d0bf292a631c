// Times GPU work the way the server runs it: kRunsPerSample runs captured
// into one CUDA graph and replayed, so a kernel of a few microseconds is
// timed, not the host's launch rate (with launches from the host, every
// candidate of a small layer measured the same ~7 us). Work that cannot be
// captured is timed with plain launches, as it will then run. The engine
// search times candidates with it, and the device pool a fused pair against
// its two layers.
#ifndef CONVSERVE_ENGINE_CUDNN_LAUNCH_TIMER_H_
#define CONVSERVE_ENGINE_CUDNN_LAUNCH_TIMER_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cudnn/captured_layers.h"
#include "engine/cudnn/cuda_resources.h"

namespace convserve {

class LaunchTimer {
 public:
  // Runs per sample, replayed back to back from one CUDA graph, so launch
  // gaps do not swamp kernels of a few microseconds.
  static constexpr int kRunsPerSample = 8;

  // `run` queues one run on `stream`; it must stay valid while the timer is
  // used.
  static absl::StatusOr<LaunchTimer> Create(cudaStream_t stream, std::function<absl::Status()> run);

  // Whether the runs replay from a CUDA graph (else: plain launches).
  bool captured() const { return captured_ != nullptr; }
  // Milliseconds per run, over one sample of kRunsPerSample runs (waits for
  // them).
  absl::StatusOr<float> Sample();

 private:
  cudaStream_t stream_ = nullptr;
  CapturedLayers::LaunchLayers launch_;
  std::shared_ptr<CapturedLayers> captured_;
  CudaEvent start_;
  CudaEvent stop_;
};

// The median of `samples` (not empty); the median sample resists clock and
// cache noise.
float MedianSample(std::vector<float> samples);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_LAUNCH_TIMER_H_
