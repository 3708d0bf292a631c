// The engine search for one layer: enumerate the selection's candidates per
// path, run each on guarded scratch buffers with fresh random data (see
// ProbeBuffers), reject any that fails, writes outside its buffers or leaves
// outputs unwritten, and keep the first that passes (heuristic policies) or
// the fastest (autotune). It runs wherever it is called: inside the engine
// prober process (the default, so a faulting candidate kills the prober, not
// the server) or in-process. An observer hears each step, to report it or to
// veto quarantined candidates.
#ifndef CONVSERVE_ENGINE_CUDNN_CANDIDATE_SEARCH_H_
#define CONVSERVE_ENGINE_CUDNN_CANDIDATE_SEARCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/conv_layer_plan.h"
#include "engine/cudnn/engine_config_id.h"
#include "engine/runtime/engine_search_report.h"

namespace convserve {

class SearchObserver {
 public:
  virtual ~SearchObserver() = default;
  // Why `id` must not run (e.g. it faulted before), or nullopt.
  virtual std::optional<std::string> Quarantined(const EngineConfigId& id) {
    return std::nullopt;
  }
  // `id` is about to touch the GPU: a crash from here until OnResult is its.
  virtual void OnTry(const EngineConfigId& id) {}
  virtual void OnResult(const CandidateResult& result) {}
};

struct SearchOptions {
  // Seed of the random inputs.
  uint64_t seed = 1;
  // Test hook (fault containment tests): the candidate at this position of
  // the first path's list launches a misaligned 16-byte store instead of
  // running, killing the process's CUDA context. -1: off.
  int testing_fault_rank = -1;
  // Test hook: autotune's final (the finalists timed again) launches that
  // store in place of its first sample, when there is a final.
  bool testing_fault_in_final = false;
  // Reproduction aid: run only the candidate with this id (ToString()); the
  // others are reported as not selected. Empty: all.
  std::string only;
  // Test the kept cuDNN plans for programmatic entry
  // (AdmitProgrammaticEntry), so the plan returned carries its verdict, and
  // under autotune time those admitted entered so, as the server's captured
  // graphs will run them (--cuda_graphs with --programmatic_entry).
  bool programmatic_entry = false;
};

// Runs the search for `problem` on `stream` (the planner's handle's). Under
// autotune: the heuristics' candidates per path, then the knob search around
// the winner (EngineSelection::autotune_knob_candidates), then (with
// `options.programmatic_entry`, which under any policy tests the plans kept)
// the kept cuDNN plans that admit programmatic entry timed again entered so,
// then the fastest few, within 10% of the best, timed again in turns; the observer hears
// OnTry for a finalist before each of its runs there, and every finalist is
// reported again after (with its new time). The report lists
// every candidate considered. When one passes, `best` (if not
// null) receives its plan, bound to scratch buffers. UNIMPLEMENTED, listing
// the reasons, when none passes; a CUDA error that leaves the context unusable
// (IsStickyCudaError) is returned as is: the process has lost the device.
absl::StatusOr<SearchReport> SearchEngines(ConvLayerPlanner& planner, cudaStream_t stream,
                                           const ConvLayerProblem& problem,
                                           const SearchOptions& options, SearchObserver* observer,
                                           std::optional<ConvLayerPlan>* best);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_CANDIDATE_SEARCH_H_
