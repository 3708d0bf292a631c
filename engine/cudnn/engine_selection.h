// How a cuDNN engine is chosen for a layer: the search (heuristic modes or
// autotune) and the filters every candidate must pass.
#ifndef CONVSERVE_ENGINE_CUDNN_ENGINE_SELECTION_H_
#define CONVSERVE_ENGINE_CUDNN_ENGINE_SELECTION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "engine/cudnn/cudnn_errata.h"

namespace convserve {

enum class EngineSearch {
  kHeuristicInstant,  // cuDNN heuristics mode A: fast to query, good picks
  kHeuristicB,        // mode B: slower to query, better on some shapes
  kFallback,          // fallback list: widest support, slowest kernels
  kAutotune,          // time the top candidates (and the unfused path), keep the fastest
};

struct EngineSelection {
  // How candidates are found.
  EngineSearch search = EngineSearch::kHeuristicInstant;
  // Skip engines cuDNN marks non-deterministic.
  bool deterministic_only = false;
  // float32 graphs only: skip tensor-core (TF32) and down-converting engines.
  bool strict_float32 = false;
  // Also race convserve's own kernels (the direct path, direct_conv.h)
  // where one exists for the layer.
  bool direct_kernels = true;
  // Skip plans needing more workspace than this.
  int64_t max_workspace_bytes = int64_t{256} << 20;
  // cuDNN engine global indices never used (an operator's blunt override).
  absl::flat_hash_set<int64_t> blocklist;
  // Known-bad engine configurations, skipped before they run. Null means the
  // shipped list: the GPU backends load it when they are created.
  std::shared_ptr<const CudnnErrata> errata;
  // kAutotune: candidates timed per path.
  int autotune_candidates = 12;
  // kAutotune: after the heuristics' candidates, settings of the winner's
  // engine one knob away from the winner's (FindKnobNeighbours) timed the
  // same way, around each new winner in turn, at most this many per layer.
  // 0: the heuristics' settings only.
  int autotune_knob_candidates = 16;
  // kAutotune: timed samples (of 8 back-to-back runs) per candidate, after
  // one warm-up run.
  int autotune_iterations = 5;
};

// What the errata and the plan store key on: the library and GPU a plan runs on.
struct CudnnTarget {
  // cudnnGetVersion() of the loaded library, e.g. 91400.
  int cudnn_version = 0;
  // major*10 + minor, e.g. 90.
  int compute_capability = 0;
  // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3".
  std::string device_name;
  // "NVIDIA H100 80GB HBM3/sm90/cudnn91400": the prefix of store keys.
  std::string Key() const;
};

// Why configuration `id` may not run `problem` under the filters that need no
// cuDNN call (the blocklist, the errata, direct_kernels), or "" when it may. The engine
// candidate filter and stored engine choices both apply it.
std::string ConfigRejection(const EngineSelection& selection, const CudnnTarget& target,
                            const ConvLayerProblem& problem, const EngineConfigId& id);

// Autotune's paths for `problem`, in search order, after the first that ran
// a candidate: whether the search also tries `path`. A float16 layer also
// races the rounding path (the conv writes float16, then the bias and
// activation are applied: one more rounding, as PyTorch's conv + add + relu
// does), since some float16 convs have fast kernels only with a float16
// output (depthwise convs, issue 12); bfloat16, with 8 bits, does not (the
// second rounding cost a graph of issue 10 6.7e-2 relative L2).
bool AutotuneAlsoTries(const ConvLayerProblem& problem, LayerPath path);
// What autotune ranks a passing candidate by: its time, times
// kRoundingSpeedup on the rounding path, so a candidate that rounds twice
// wins only when it is that much faster than the best that rounds once.
// The search's winner and SearchReport::Ranked (the server's choice) both
// order by it.
inline constexpr float kRoundingSpeedup = 1.25f;
float AutotuneRankMs(float ms, LayerPath path);

// "heuristic" (= heuristic_a), "heuristic_b", "fallback" or "autotune".
absl::StatusOr<EngineSearch> ParseEngineSearch(const std::string& name);
const char* EngineSearchName(EngineSearch search);

// Reads engine global indices, one per line; '#' starts a comment.
// INVALID_ARGUMENT names the line that is not an integer.
absl::StatusOr<absl::flat_hash_set<int64_t>> ReadEngineBlocklist(const std::string& path);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_ENGINE_SELECTION_H_
