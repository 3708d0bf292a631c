#include "engine/runtime/warmup_shapes.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace convserve {
namespace {

absl::Status EntryError(absl::string_view entry, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(
      "warm-up shape '", entry, "' ", problem,
      "; write N:HxW (or N:DxHxW for 3-D graphs), e.g. 1:56x56,8:56x56"));
}

}  // namespace

absl::StatusOr<std::vector<WarmupSize>> ParseWarmupSizes(absl::string_view text) {
  std::vector<WarmupSize> sizes;
  if (absl::StripAsciiWhitespace(text).empty()) return sizes;
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    const absl::string_view entry = absl::StripAsciiWhitespace(raw);
    if (entry.empty()) return EntryError(entry, "is empty (a stray comma?)");
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    if (parts.size() != 2) return EntryError(entry, "needs exactly one ':' between N and the dims");
    WarmupSize size;
    if (!absl::SimpleAtoi(parts[0], &size.batch) || size.batch < 1) {
      return EntryError(entry, "has an N that is not a whole number >= 1");
    }
    for (absl::string_view dim : absl::StrSplit(parts[1], 'x')) {
      int64_t value = 0;
      if (!absl::SimpleAtoi(dim, &value) || value < 1) {
        return EntryError(entry, absl::StrCat("has a spatial dim '", dim,
                                              "' that is not a whole number >= 1"));
      }
      size.spatial.push_back(value);
    }
    if (size.spatial.size() != 2 && size.spatial.size() != 3) {
      return EntryError(entry, absl::StrCat("has ", size.spatial.size(),
                                            " spatial dims; 2-D graphs take 2, 3-D graphs 3"));
    }
    sizes.push_back(std::move(size));
  }
  return sizes;
}

std::string WarmupSizeToString(const WarmupSize& size) {
  return absl::StrCat(size.batch, ":", absl::StrJoin(size.spatial, "x"));
}

absl::StatusOr<Shape> WarmupInputShape(const Graph& graph, const WarmupSize& size) {
  if (static_cast<int>(size.spatial.size()) != graph.spatial_rank()) {
    return absl::FailedPreconditionError(
        absl::StrCat("warm-up shape ", WarmupSizeToString(size), " has ", size.spatial.size(),
                     " spatial dims; graph '", graph.name(), "' has ", graph.spatial_rank()));
  }
  Shape shape = {size.batch, graph.spec().input_channels};
  shape.insert(shape.end(), size.spatial.begin(), size.spatial.end());
  return shape;
}

std::vector<Shape> WarmupExecutionShapes(const std::vector<Shape>& inputs,
                                         const DynamicBatchingOptions& batching) {
  std::vector<Shape> shapes;
  const auto add = [&shapes](Shape shape) {
    if (std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) {
      shapes.push_back(std::move(shape));
    }
  };
  for (const Shape& input : inputs) {
    add(input);
    const int64_t n = input.empty() ? 0 : input[0];
    if (batching.max_batch_size <= 0 || n < 1 || n >= batching.max_batch_size) continue;
    std::vector<int64_t> batches;
    for (int64_t preferred : batching.preferred_batch_sizes) {
      if (preferred > n && preferred % n == 0) batches.push_back(preferred);
    }
    batches.push_back(batching.max_batch_size / n * n);
    std::sort(batches.begin(), batches.end());
    for (int64_t batch : batches) {
      if (batch <= n) continue;
      Shape joined = input;
      joined[0] = batch;
      add(std::move(joined));
    }
  }
  return shapes;
}

}  // namespace convserve
