// Which cuDNN engine configuration runs a layer: the path (fused graph, or
// conv-only plus our epilogue kernel), the engine's global index and its knob
// settings. Together with the layer problem and the library version this
// names a candidate exactly: heuristics may offer one engine with several
// knob settings, and a defect may live in one setting only. Plain data, no
// cuDNN types, so the server, the prober and the plan store share it.
#ifndef CONVSERVE_ENGINE_CUDNN_ENGINE_CONFIG_ID_H_
#define CONVSERVE_ENGINE_CUDNN_ENGINE_CONFIG_ID_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace convserve {

enum class LayerPath {
  // One cuDNN plan does conv, bias and activation, rounding once.
  kFused,
  // A cuDNN conv plan writes float32 (in scratch for 16-bit graphs); our
  // bias+activation kernel writes Y, rounding once, as the fused plan does.
  kUnfused,
  // 16-bit graphs whose conv has no engine with a float32 output: the conv
  // writes Y in the graph dtype and our kernel finishes it in place, so the
  // conv result is rounded before the bias is added (a second rounding).
  kUnfusedRounding,
  // convserve's own kernel (engine/cudnn/direct_conv.h) does conv, bias and
  // activation, rounding once; no cuDNN plan. Engine and knob numbers are
  // ours on this path.
  kDirect,
};
inline constexpr LayerPath kLayerPaths[] = {LayerPath::kFused, LayerPath::kUnfused,
                                            LayerPath::kUnfusedRounding, LayerPath::kDirect};
const char* LayerPathName(LayerPath path);

struct EngineConfigId {
  LayerPath path = LayerPath::kFused;
  // cuDNN's CUDNN_ATTR_ENGINE_GLOBAL_INDEX (on kDirect, ours).
  int64_t engine = -1;
  // (cudnnBackendKnobType_t, value), sorted by knob type (on kDirect, ours).
  std::vector<std::pair<int64_t, int64_t>> knobs;

  // "fused:e12:k2=21,k14=3" (path: fused, unfused, unfused_rounding or
  // direct) ("...:e12:" with no knobs). No spaces.
  std::string ToString() const;
  // INVALID_ARGUMENT when `text` is not what ToString writes.
  static absl::StatusOr<EngineConfigId> Parse(absl::string_view text);

  bool operator==(const EngineConfigId& other) const {
    return path == other.path && engine == other.engine && knobs == other.knobs;
  }
  bool operator!=(const EngineConfigId& other) const { return !(*this == other); }
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_ENGINE_CONFIG_ID_H_
