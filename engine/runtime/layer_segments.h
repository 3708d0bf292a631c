// Where a request's layers are split so that a worker can check for
// cancellation: the worker queues one segment's layers (plain launches or one
// CUDA graph), waits for them, checks, and queues the next. No CUDA here, so
// the rule is tested on CPU.
#ifndef CONVSERVE_ENGINE_RUNTIME_LAYER_SEGMENTS_H_
#define CONVSERVE_ENGINE_RUNTIME_LAYER_SEGMENTS_H_

#include <cstddef>
#include <vector>

namespace convserve {

// One past the last layer of each segment, in order; the last is
// `layer_ms.size()`. A segment closes at the first layer that brings its
// estimated work to at least `max_ms`, so a cancelled request stops within
// about `max_ms` of work plus one layer. Empty for no layers.
inline std::vector<size_t> LayerSegmentEnds(const std::vector<double>& layer_ms, double max_ms) {
  std::vector<size_t> ends;
  double queued_ms = 0;
  for (size_t i = 0; i < layer_ms.size(); ++i) {
    queued_ms += layer_ms[i];
    if (queued_ms >= max_ms || i + 1 == layer_ms.size()) {
      ends.push_back(i + 1);
      queued_ms = 0;
    }
  }
  return ends;
}

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_LAYER_SEGMENTS_H_
