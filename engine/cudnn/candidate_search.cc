#include "engine/cudnn/candidate_search.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/launch_timer.h"
#include "engine/cudnn/probe_buffers.h"
#include "engine/cudnn/programmatic_entry.h"
#include "engine/status_macros.h"
#include "spdlog/spdlog.h"

namespace convserve {
namespace {

// Autotune's final: the plans kept (the fastest so far), those within this
// factor of the best timed again, in this many rounds of one sample each.
constexpr size_t kFinalists = 3;
constexpr float kFinalistSpread = 1.10f;
constexpr int kFinalistRounds = 10;

// cuDNN's paths first: heuristic policies keep the first path that runs, so
// they take our kernels only where no cuDNN engine runs the layer.
std::vector<LayerPath> PathsOf(const ConvLayerProblem& problem, const EngineSelection& selection) {
  std::vector<LayerPath> paths = {LayerPath::kFused};
  if (problem.needs_epilogue()) paths.push_back(LayerPath::kUnfused);
  if (problem.needs_epilogue() && problem.dtype != DType::kFloat32) {
    paths.push_back(LayerPath::kUnfusedRounding);
  }
  if (selection.direct_kernels && DirectPathApplies(problem)) paths.push_back(LayerPath::kDirect);
  return paths;
}

// Times `plan` as the server runs it (LaunchTimer).
absl::StatusOr<LaunchTimer> PlanTimer(cudnnHandle_t handle, cudaStream_t stream,
                                      const ConvLayerProblem& problem, const ConvLayerPlan& plan) {
  return LaunchTimer::Create(stream, [handle, stream, &problem, &plan] {
    return plan.RunBound(handle, stream, problem);
  });
}

class CandidateRunner {
 public:
  CandidateRunner(ConvLayerPlanner& planner, cudaStream_t stream, const ConvLayerProblem& problem,
                  ProbeBuffers& buffers)
      : planner_(planner), stream_(stream), problem_(problem), buffers_(buffers) {}

  // Runs one candidate. A non-OK status means the device is lost (a sticky
  // error); otherwise `result` says whether the candidate passed.
  // A knob-search candidate (`knob_search`) must also capture into a CUDA
  // graph: the heuristics' settings of its engine did, and one that cannot
  // would cost every request of its graph the replay.
  absl::Status Run(CandidateSet& set, size_t index, bool fault_for_testing, bool knob_search,
                   CandidateResult* result, std::optional<ConvLayerPlan>* plan_out) {
    result->id = set.candidates[index].id;
    absl::StatusOr<ConvLayerPlan> plan = planner_.Finalize(problem_, set, index);
    if (!plan.ok()) return Reject(result, "does not finalize: ", plan.status());
    result->workspace_bytes = plan->workspace_bytes();
    // Failures that leave the device usable (no memory for a large
    // workspace, say) reject this candidate; a lost context ends the search.
    absl::Status prepared = buffers_.ReserveWorkspace(plan->workspace_bytes());
    if (prepared.ok()) prepared = buffers_.Reset();
    if (prepared.ok()) prepared = plan->Bind(problem_, buffers_.buffers());
    if (StickyCudaError(prepared, stream_) != cudaSuccess) return prepared;
    if (!prepared.ok()) return Reject(result, "cannot be prepared: ", prepared);
    const ConvLayerBuffers b = buffers_.buffers();
    spdlog::debug("{}: x {} w {} y {} workspace {} ({} bytes)", result->id.ToString(),
                  absl::StrFormat("%p", b.x), absl::StrFormat("%p", b.w),
                  absl::StrFormat("%p", b.y), absl::StrFormat("%p", b.workspace),
                  plan->workspace_bytes());
    if (fault_for_testing) {
      RETURN_IF_ERROR(LaunchMisalignedWriteForTesting(b.y, stream_));
      CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    }
    absl::Status ran = plan->RunBound(planner_.handle(), stream_, problem_);
    if (ran.ok()) {
      const cudaError_t synced = cudaStreamSynchronize(stream_);
      if (synced != cudaSuccess) ran = CudaError(synced, "running the candidate", __FILE__, __LINE__);
    }
    if (StickyCudaError(ran, stream_) != cudaSuccess) return ran;
    if (!ran.ok()) return Reject(result, "fails to run: ", ran);
    absl::Status checked = buffers_.Check(/*check_output=*/true);
    if (StickyCudaError(checked, stream_) != cudaSuccess) return checked;
    if (!checked.ok()) return Reject(result, "", checked);

    if (planner_.selection().search == EngineSearch::kAutotune) {
      bool captured = false;
      absl::StatusOr<float> ms = Time(*plan, &captured);
      if (StickyCudaError(ms.status(), stream_) != cudaSuccess) return ms.status();
      if (!ms.ok()) return Reject(result, "fails while timed: ", ms.status());
      if (knob_search && !captured) {
        return Reject(result, "", absl::FailedPreconditionError(
                                      "cannot be captured into a CUDA graph (a knob-search "
                                      "candidate must be)"));
      }
      checked = buffers_.Check(/*check_output=*/false);
      if (StickyCudaError(checked, stream_) != cudaSuccess) return checked;
      if (!checked.ok()) return Reject(result, "while timed: ", checked);
      result->ms = *ms;
      plan->set_measured_ms(*ms);
    }
    result->ok = true;
    *plan_out = *std::move(plan);
    return absl::OkStatus();
  }

 private:
  static absl::Status Reject(CandidateResult* result, absl::string_view prefix,
                             const absl::Status& why) {
    result->ok = false;
    result->detail = absl::StrCat(prefix, why.message());
    return absl::OkStatus();
  }

  // Times `plan` the way the server runs it (PlanTimer), the selection's
  // autotune_iterations samples, and returns the median.
  absl::StatusOr<float> Time(const ConvLayerPlan& plan, bool* captured) {
    ASSIGN_OR_RETURN(LaunchTimer timer, PlanTimer(planner_.handle(), stream_, problem_, plan));
    *captured = timer.captured();
    std::vector<float> times;
    for (int i = 0; i < std::max(planner_.selection().autotune_iterations, 1); ++i) {
      ASSIGN_OR_RETURN(float ms, timer.Sample());
      times.push_back(ms);
    }
    return MedianSample(std::move(times));
  }

 public:
  // Tests `plan` for programmatic entry (AdmitProgrammaticEntry, on its own
  // scratch buffers) and, admitted and `time`, times it again entered so;
  // binds it to the search's buffers again either way. Returns the verdict
  // for the report; a non-OK status means the device is lost.
  absl::StatusOr<std::string> Enter(ConvLayerPlan& plan, bool time) {
    absl::StatusOr<EntryVerdict> verdict =
        AdmitProgrammaticEntry(plan, problem_, planner_.handle(), stream_);
    if (StickyCudaError(verdict.status(), stream_) != cudaSuccess) return verdict.status();
    RETURN_IF_ERROR(plan.Bind(problem_, buffers_.buffers()));
    if (!verdict.ok()) {
      return absl::StrCat("programmatic entry not tested: ", verdict.status().message());
    }
    if (!verdict->admitted) {
      return absl::StrCat("programmatic entry refused: ", verdict->detail);
    }
    if (!time) return absl::StrCat("programmatic entry admitted: ", verdict->detail);
    bool captured = false;
    absl::StatusOr<float> ms = Time(plan, &captured);
    if (StickyCudaError(ms.status(), stream_) != cudaSuccess) return ms.status();
    if (!ms.ok() || !captured) {
      plan.set_programmatic_entry(false);
      return absl::StrCat("programmatic entry admitted, not timed: ",
                          ms.ok() ? "the runs were not captured" : ms.status().message());
    }
    plan.set_measured_ms(*ms);
    return absl::StrFormat("timed entered programmatically (%.4f ms)", *ms);
  }

  // The finalists again, `rounds` rounds of one sample each in turn, so
  // drift in clocks or temperature falls on all of them alike; each plan is
  // bound to the buffers again first (the workspace may have grown since it
  // ran). The observer hears OnTry for the finalist before each step that
  // touches the GPU with it, so a fault here is blamed on the plan that ran
  // (Sample synchronizes); the caller reports every finalist again after.
  // `fault_for_testing`: the first finalist's first sample launches a
  // misaligned write instead (SearchOptions::testing_fault_in_final).
  // Returns each one's median.
  absl::StatusOr<std::vector<float>> Retime(std::vector<ConvLayerPlan>& plans, int rounds,
                                            SearchObserver* observer, bool fault_for_testing) {
    std::vector<LaunchTimer> timers;
    for (ConvLayerPlan& plan : plans) {
      observer->OnTry(plan.id());
      RETURN_IF_ERROR(plan.Bind(problem_, buffers_.buffers()));
      ASSIGN_OR_RETURN(LaunchTimer timer, PlanTimer(planner_.handle(), stream_, problem_, plan));
      timers.push_back(std::move(timer));
    }
    std::vector<std::vector<float>> times(plans.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < timers.size(); ++i) {
        observer->OnTry(plans[i].id());
        if (fault_for_testing && r == 0 && i == 0) {
          RETURN_IF_ERROR(LaunchMisalignedWriteForTesting(buffers_.buffers().y, stream_));
          CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
        }
        ASSIGN_OR_RETURN(float ms, timers[i].Sample());
        times[i].push_back(ms);
      }
    }
    std::vector<float> medians;
    for (std::vector<float>& t : times) medians.push_back(MedianSample(std::move(t)));
    return medians;
  }

 private:
  ConvLayerPlanner& planner_;
  cudaStream_t stream_;
  const ConvLayerProblem& problem_;
  ProbeBuffers& buffers_;
};

}  // namespace

absl::StatusOr<SearchReport> SearchEngines(ConvLayerPlanner& planner, cudaStream_t stream,
                                           const ConvLayerProblem& problem,
                                           const SearchOptions& options, SearchObserver* observer,
                                           std::optional<ConvLayerPlan>* best) {
  SearchObserver no_observer;
  if (observer == nullptr) observer = &no_observer;
  const bool autotune = planner.selection().search == EngineSearch::kAutotune;
  const int max_run = std::max(planner.selection().autotune_candidates, 1);
  ASSIGN_OR_RETURN(ProbeBuffers buffers, ProbeBuffers::Create(problem, stream, options.seed));
  CandidateRunner runner(planner, stream, problem, buffers);
  SearchReport report;
  report.timed = autotune;
  // The passing plans kept, best first: under autotune the kFinalists of
  // lowest rank (AutotuneRankMs), else the first that passed.
  std::vector<ConvLayerPlan> kept;
  const auto rank = [](const ConvLayerPlan& p) { return AutotuneRankMs(p.measured_ms(), p.path()); };
  bool named_found = false;
  // Candidate `i` of `set`, unless filtered: false when it did not run.
  const auto try_candidate = [&](CandidateSet& set, size_t i, bool fault_for_testing,
                                 bool knob_search) -> absl::StatusOr<bool> {
    CandidateResult result;
    result.id = set.candidates[i].id;
    if (!options.only.empty()) {
      if (result.id.ToString() != options.only) return false;
      named_found = true;
    }
    if (std::optional<std::string> why = observer->Quarantined(result.id)) {
      result.detail = absl::StrCat("quarantined: ", *why);
      observer->OnResult(result);
      report.results.push_back(std::move(result));
      return false;
    }
    observer->OnTry(result.id);
    std::optional<ConvLayerPlan> plan;
    RETURN_IF_ERROR(runner.Run(set, i, fault_for_testing, knob_search, &result, &plan));
    observer->OnResult(result);
    report.results.push_back(result);
    if (result.ok) {
      // After any of equal rank: the first to run wins ties.
      const auto at = std::upper_bound(kept.begin(), kept.end(), rank(*plan),
                                       [&](float r, const ConvLayerPlan& p) { return r < rank(p); });
      kept.insert(at, *std::move(plan));
      if (kept.size() > kFinalists) kept.pop_back();
    }
    return true;
  };

  // The heuristics' candidates, path by path.
  absl::flat_hash_map<LayerPath, std::shared_ptr<const ConvOperationGraph>> graphs;
  bool first_path = true;
  for (LayerPath path : PathsOf(problem, planner.selection())) {
    const bool have_winner = !kept.empty();
    const bool rounding = path == LayerPath::kUnfusedRounding;
    // Heuristic policies stop at the first path that runs; the rounding
    // path is for convs no engine runs with a float32 output, and under
    // autotune for float16 convs much faster that way (engine_selection.h).
    if (have_winner && !autotune) break;
    if (have_winner && !AutotuneAlsoTries(problem, path)) continue;
    // A race against a winner that rounds once: half the candidates.
    const int path_max_run = rounding && have_winner ? std::max(max_run / 2, 1) : max_run;
    absl::StatusOr<CandidateSet> set = planner.Candidates(problem, path);
    const bool fault_path = first_path;
    first_path = false;
    if (!set.ok()) {
      report.skipped.push_back(absl::StrCat(LayerPathName(path), ": ", set.status().message()));
      continue;
    }
    if (set->graph != nullptr) graphs[path] = set->graph;
    for (std::string& skipped : set->skipped) report.skipped.push_back(std::move(skipped));
    int run = 0;
    for (size_t i = 0; i < set->candidates.size(); ++i) {
      if (autotune && run >= path_max_run) break;
      ASSIGN_OR_RETURN(const bool ran,
                       try_candidate(*set, i,
                                     fault_path && static_cast<int>(i) == options.testing_fault_rank,
                                     /*knob_search=*/false));
      if (ran) ++run;
      if (ran && !autotune && !kept.empty()) break;
    }
  }

  // A configuration named for reproduction that the heuristics did not list
  // (one the knob search found): build it by name.
  if (!options.only.empty() && !named_found) {
    absl::StatusOr<EngineConfigId> id = EngineConfigId::Parse(options.only);
    if (id.ok() && graphs.contains(id->path)) {
      absl::StatusOr<CandidateSet> set = planner.Named(graphs[id->path], *id);
      if (set.ok()) {
        RETURN_IF_ERROR(try_candidate(*set, 0, false, /*knob_search=*/false).status());
      } else {
        report.skipped.push_back(absl::StrCat(options.only, ": ", set.status().message()));
      }
    }
  }

  // Autotune's knob search: the best cuDNN plan's engine with one knob
  // moved, around each new best, within the budget (our kernels' knobs are
  // all raced already).
  int knob_budget = autotune && options.only.empty()
                        ? planner.selection().autotune_knob_candidates
                        : 0;
  const auto best_cudnn = [&]() -> const ConvLayerPlan* {
    for (const ConvLayerPlan& plan : kept) {
      if (graphs.contains(plan.path())) return &plan;
    }
    return nullptr;
  };
  while (knob_budget > 0 && best_cudnn() != nullptr) {
    std::vector<EngineConfigId> tried;
    for (const CandidateResult& result : report.results) tried.push_back(result.id);
    const EngineConfigId center = best_cudnn()->id();
    absl::StatusOr<CandidateSet> set =
        planner.KnobNeighbours(problem, graphs[center.path], center, tried, knob_budget);
    if (!set.ok()) {
      report.skipped.push_back(
          absl::StrCat(center.ToString(), ": no knob search: ", set.status().message()));
      break;
    }
    for (std::string& skipped : set->skipped) report.skipped.push_back(std::move(skipped));
    if (set->candidates.empty()) break;
    for (size_t i = 0; i < set->candidates.size() && knob_budget > 0; ++i) {
      ASSIGN_OR_RETURN(const bool ran, try_candidate(*set, i, false, /*knob_search=*/true));
      if (ran) --knob_budget;
    }
    const ConvLayerPlan* now = best_cudnn();
    if (now == nullptr || now->id() == center) break;
  }

  const auto sort_kept = [&] {
    std::stable_sort(kept.begin(), kept.end(), [&](const ConvLayerPlan& a,
                                                   const ConvLayerPlan& b) {
      return rank(a) < rank(b);
    });
  };
  // The kept plans again, with their new time and `detail`, which also ends
  // the OnTry before it (observers replace earlier results).
  const auto report_again = [&](const ConvLayerPlan& plan, const std::string& detail) {
    for (CandidateResult& result : report.results) {
      if (result.id != plan.id() || !result.ok) continue;
      result.ms = plan.measured_ms();
      if (!detail.empty()) result.detail = detail;
      observer->OnResult(result);
    }
  };

  // The kept cuDNN plans tested for programmatic entry, so the plan the
  // search returns carries its verdict; under autotune those admitted are
  // timed entered so: the candidates above ran with a plain edge into their
  // first kernel, which the server's graphs keep only for the plans the
  // test refuses.
  if (options.programmatic_entry) {
    for (ConvLayerPlan& plan : kept) {
      if (!graphs.contains(plan.path())) continue;
      observer->OnTry(plan.id());
      ASSIGN_OR_RETURN(const std::string detail, runner.Enter(plan, autotune));
      report_again(plan, detail);
    }
    sort_kept();
  }

  // Autotune's final: the kept plans within kFinalistSpread of the best are
  // timed again in turns, and the best of that timing wins. One pass of a
  // few samples each picks among near-equal candidates by noise; the server
  // serves the winner for every request of the shape.
  while (kept.size() > 1 && rank(kept.back()) > rank(kept.front()) * kFinalistSpread) {
    kept.pop_back();
  }
  if (autotune && kept.size() > 1) {
    absl::StatusOr<std::vector<float>> ms =
        runner.Retime(kept, kFinalistRounds, observer, options.testing_fault_in_final);
    if (StickyCudaError(ms.status(), stream) != cudaSuccess) return ms.status();
    if (!ms.ok()) {
      spdlog::warn("{}: the finalists were not timed again ({}); keeping the first timing",
                   problem.Describe(), std::string(ms.status().message()));
    }
    // Every finalist is reported again, which also ends the last one's
    // OnTry: with its new time, the later figure standing for it (observers
    // replace), or with its first one when the final failed.
    for (size_t i = 0; i < kept.size(); ++i) {
      if (ms.ok()) kept[i].set_measured_ms((*ms)[i]);
      report_again(kept[i], "");
    }
    sort_kept();
  }

  if (kept.empty()) {
    return absl::UnimplementedError(absl::StrCat("no engine runs layer ", problem.Describe(),
                                                 " under the selection policy: ",
                                                 report.Summary()));
  }
  report.chosen = kept.front().id();
  if (best != nullptr) *best = std::move(kept.front());
  return report;
}

}  // namespace convserve
