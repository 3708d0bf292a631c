#include "engine/cudnn/candidate_search.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cudnn/captured_layers.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/probe_buffers.h"
#include "engine/status_macros.h"
#include "spdlog/spdlog.h"

namespace convserve {
namespace {

// Runs per timed sample, replayed back to back from one CUDA graph (Time),
// so launch gaps do not swamp kernels of a few microseconds; the median
// sample resists clock and cache noise.
constexpr int kRunsPerSample = 8;

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

class CandidateRunner {
 public:
  CandidateRunner(ConvLayerPlanner& planner, cudaStream_t stream, const ConvLayerProblem& problem,
                  ProbeBuffers& buffers)
      : planner_(planner), stream_(stream), problem_(problem), buffers_(buffers) {}

  // Runs one candidate. A non-OK status means the device is lost (a sticky
  // error); otherwise `result` says whether the candidate passed.
  absl::Status Run(CandidateSet& set, size_t index, bool fault_for_testing,
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
      absl::StatusOr<float> ms = Time(*plan);
      if (StickyCudaError(ms.status(), stream_) != cudaSuccess) return ms.status();
      if (!ms.ok()) return Reject(result, "fails while timed: ", ms.status());
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

  // Times `plan` the way the server runs it: kRunsPerSample runs captured
  // into one CUDA graph and replayed, so a kernel of a few microseconds is
  // timed, not the host's launch rate (with launches from the host, every
  // candidate of a small layer measured the same ~7 us). A plan that cannot
  // be captured is timed with plain launches, as it will then run.
  absl::StatusOr<float> Time(const ConvLayerPlan& plan) {
    const auto launch = [&](size_t begin, size_t end) -> absl::Status {
      for (size_t r = begin; r < end; ++r) {
        RETURN_IF_ERROR(plan.RunBound(planner_.handle(), stream_, problem_));
      }
      return absl::OkStatus();
    };
    ASSIGN_OR_RETURN(CapturedLayers::Result capture,
                     CapturedLayers::Capture(stream_, {static_cast<size_t>(kRunsPerSample)},
                                             launch, nullptr));
    if (capture.captured == nullptr) {
      spdlog::debug("timing without a CUDA graph (capture failed: {})", capture.failure);
    }
    ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create());
    ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create());
    std::vector<float> times;
    for (int i = 0; i < std::max(planner_.selection().autotune_iterations, 1); ++i) {
      CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream_));
      if (capture.captured != nullptr) {
        CUDA_RETURN_IF_ERROR(capture.captured->Launch(0, stream_));
      } else {
        RETURN_IF_ERROR(launch(0, kRunsPerSample));
      }
      CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream_));
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
      float ms = 0;
      CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      times.push_back(ms / kRunsPerSample);
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return times[times.size() / 2];
  }

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
  std::optional<ConvLayerPlan> winner;
  bool first_path = true;
  for (LayerPath path : PathsOf(problem, planner.selection())) {
    const bool have_winner = winner.has_value();
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
    for (std::string& skipped : set->skipped) report.skipped.push_back(std::move(skipped));
    int run = 0;
    for (size_t i = 0; i < set->candidates.size(); ++i) {
      if (autotune && run >= path_max_run) break;
      CandidateResult result;
      result.id = set->candidates[i].id;
      if (!options.only.empty() && result.id.ToString() != options.only) continue;
      if (std::optional<std::string> why = observer->Quarantined(result.id)) {
        result.detail = absl::StrCat("quarantined: ", *why);
        observer->OnResult(result);
        report.results.push_back(std::move(result));
        continue;
      }
      observer->OnTry(result.id);
      ++run;
      std::optional<ConvLayerPlan> plan;
      RETURN_IF_ERROR(runner.Run(*set, i,
                                 fault_path && static_cast<int>(i) == options.testing_fault_rank,
                                 &result, &plan));
      observer->OnResult(result);
      report.results.push_back(result);
      if (!result.ok) continue;
      if (!winner.has_value() ||
          AutotuneReplaces(plan->measured_ms(), plan->path(), winner->measured_ms(),
                           winner->path())) {
        winner = std::move(plan);
      }
      if (!autotune) break;
    }
  }
  if (!winner.has_value()) {
    return absl::UnimplementedError(absl::StrCat("no engine runs layer ", problem.Describe(),
                                                 " under the selection policy: ",
                                                 report.Summary()));
  }
  if (best != nullptr) *best = std::move(winner);
  return report;
}

}  // namespace convserve
