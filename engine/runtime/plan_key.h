// What identifies a built plan: one layer of one graph for one input shape,
// on one device (and worker, where plans are per worker), under one engine
// selection policy.
#ifndef CONVSERVE_ENGINE_RUNTIME_PLAN_KEY_H_
#define CONVSERVE_ENGINE_RUNTIME_PLAN_KEY_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/tensor.h"

namespace convserve {

struct PlanKey {
  // Graph fingerprint.
  std::string graph_id;
  // Layer index in the graph.
  int layer = 0;
  // Logical input dims of the layer.
  Shape input_shape;
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kNCHW;
  // CUDA device ordinal; -1 for keys shared by every device of a model.
  int device = 0;
  // Worker on the device; -1 for keys shared by the device's workers.
  int worker = -1;
  // Engine selection policy, e.g. "autotune/strict".
  std::string policy;

  friend bool operator==(const PlanKey& a, const PlanKey& b) {
    return a.graph_id == b.graph_id && a.layer == b.layer && a.input_shape == b.input_shape &&
           a.dtype == b.dtype && a.layout == b.layout && a.device == b.device &&
           a.worker == b.worker && a.policy == b.policy;
  }
  template <typename H>
  friend H AbslHashValue(H h, const PlanKey& k) {
    return H::combine(std::move(h), k.graph_id, k.layer, k.input_shape, k.dtype, k.layout,
                      k.device, k.worker, k.policy);
  }
  std::string ToString() const {
    return absl::StrCat(graph_id, "/layer", layer, "/", absl::StrJoin(input_shape, "x"), "/",
                        DTypeName(dtype), "/", LayoutName(layout), "/gpu", device, "/w", worker,
                        "/", policy);
  }
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_PLAN_KEY_H_
