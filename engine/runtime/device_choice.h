// The scheduler's choice among a process's GPUs: the one with the least
// outstanding work, ties broken in turn. DevicePool calls it for each
// request; it is a plain function of the GPUs' figures so that a machine
// without GPUs can test it.
#ifndef CONVSERVE_ENGINE_RUNTIME_DEVICE_CHOICE_H_
#define CONVSERVE_ENGINE_RUNTIME_DEVICE_CHOICE_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"

namespace convserve {

// One GPU as the scheduler sees it.
struct DeviceLoad {
  // Work queued or running on it (DevicePool: input + output bytes).
  int64_t outstanding = 0;
  // False once its CUDA context is lost.
  bool usable = true;
};

// Index of the usable GPU with the least outstanding work, scanning from
// `start` (mod the count) so that among equals the first one at or after
// `start` wins: a caller that advances `start` by one per call spreads ties
// over all GPUs instead of sending them to GPU 0. -1 when none is usable.
int LeastLoadedDevice(absl::Span<const DeviceLoad> devices, size_t start);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_DEVICE_CHOICE_H_
