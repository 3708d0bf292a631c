// Warm-up at load (docs/runtime.md, "Warm-up at load"): which input shapes a
// graph's plans are built for before it is reported ready. The server flag
// --warmup_shapes and convserve-load's --warmup_shapes list them as
// N:HxW (or N:DxHxW for 3-D graphs), the graph giving C; the runner then
// builds plans for each of them and, with dynamic batching, for the batches
// the batcher forms from them.
#ifndef CONVSERVE_ENGINE_RUNTIME_WARMUP_SHAPES_H_
#define CONVSERVE_ENGINE_RUNTIME_WARMUP_SHAPES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/graph.h"
#include "engine/runtime/dynamic_batcher.h"
#include "engine/tensor.h"

namespace convserve {

// One entry of a warm-up list: N and the spatial dims, C left to the graph.
struct WarmupSize {
  // N of the requests to warm up for; >= 1.
  int64_t batch = 1;
  // H, W (2-D graphs) or D, H, W (3-D graphs); each >= 1.
  std::vector<int64_t> spatial;
};

// Parses "1:56x56,8:56x56" (entries separated by commas, N before the colon,
// spatial dims separated by 'x'). Empty text is an empty list. Errors are
// INVALID_ARGUMENT naming the entry and what is wrong with it.
absl::StatusOr<std::vector<WarmupSize>> ParseWarmupSizes(absl::string_view text);

// "1:56x56".
std::string WarmupSizeToString(const WarmupSize& size);

// The graph's logical input shape N, C, spatial for `size`.
// FAILED_PRECONDITION when the size has another spatial rank than the graph
// (a server-wide list may hold sizes for 2-D and 3-D graphs; each graph
// takes the ones of its rank).
absl::StatusOr<Shape> WarmupInputShape(const Graph& graph, const WarmupSize& size);

// The execution input shapes whose plans make requests of `inputs` build
// none: each input itself and, when `batching` is on, the batches a busy
// stream of requests of that shape forms: each preferred batch size that is
// a multiple of its N, and the largest multiple of its N within
// max_batch_size (other sizes, from mixed N or partial batches, build their
// plans on first use). In order, without repeats.
std::vector<Shape> WarmupExecutionShapes(const std::vector<Shape>& inputs,
                                         const DynamicBatchingOptions& batching);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_WARMUP_SHAPES_H_
