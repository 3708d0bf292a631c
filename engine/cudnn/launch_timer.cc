#include "engine/cudnn/launch_timer.h"

#include <algorithm>
#include <utility>

#include "engine/cudnn/cudnn_status.h"
#include "engine/status_macros.h"
#include "spdlog/spdlog.h"

namespace convserve {

absl::StatusOr<LaunchTimer> LaunchTimer::Create(cudaStream_t stream,
                                                std::function<absl::Status()> run) {
  LaunchTimer timer;
  timer.stream_ = stream;
  timer.launch_ = [run = std::move(run)](size_t begin, size_t end) -> absl::Status {
    for (size_t r = begin; r < end; ++r) RETURN_IF_ERROR(run());
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(CapturedLayers::Result capture,
                   CapturedLayers::Capture(stream, {static_cast<size_t>(kRunsPerSample)},
                                           timer.launch_, nullptr));
  if (capture.captured == nullptr) {
    spdlog::debug("timing without a CUDA graph (capture failed: {})", capture.failure);
  }
  timer.captured_ = std::move(capture.captured);
  ASSIGN_OR_RETURN(timer.start_, CudaEvent::Create());
  ASSIGN_OR_RETURN(timer.stop_, CudaEvent::Create());
  return timer;
}

absl::StatusOr<float> LaunchTimer::Sample() {
  CUDA_RETURN_IF_ERROR(cudaEventRecord(start_.get(), stream_));
  if (captured_ != nullptr) {
    CUDA_RETURN_IF_ERROR(captured_->Launch(0, stream_));
  } else {
    RETURN_IF_ERROR(launch_(0, kRunsPerSample));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_.get(), stream_));
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_.get()));
  float ms = 0;
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_.get(), stop_.get()));
  return ms / kRunsPerSample;
}

float MedianSample(std::vector<float> samples) {
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

}  // namespace convserve
