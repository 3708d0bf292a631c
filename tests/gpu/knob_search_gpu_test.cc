// Autotune's knob search (FindKnobNeighbours in engine_candidates.h): after
// the heuristics' candidates, settings of the winner's engine one knob away
// from it are probed and timed like any candidate, around each new winner.
// Then the final: the fastest few timed again in turns.
// On seeded random dense layers (every dtype and layout, odd channel counts
// and sizes, 1x1 to 5x5, strides 1 and 2) and three of the benchmark's
// shapes:
// - the search runs knob-search candidates within the budget, each one knob
//   away from a configuration tried before it, on the same engine and path;
// - every one that passed, rebuilt by name, matches the float64 reference
//   (output filled with NaN first, guard bytes after it), as does the winner;
// - with the budget at 0 none runs;
// - one named for reproduction (SearchOptions::only) runs alone, though no
//   heuristics list offers it;
// - the final names the finalist it runs (OnTry) before each of its runs and
//   reports every finalist again, leaving none in flight; a fault in the
//   final (SearchOptions::testing_fault_in_final, in a child process) is
//   blamed on a finalist, so the prober or the server quarantines it.
// The searches run in this process, under the shipped cuDNN errata as the
// server's do. Skips without a GPU. CONVSERVE_KNOB_SEED and
// CONVSERVE_KNOB_CASES change the random layers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/candidate_search.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/cudnn/cudnn_errata.h"
#include "engine/cudnn/device_weights.h"
#include "gtest/gtest.h"
#include "tests/test_util/cudnn_device_test.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/random_tensor.h"

namespace convserve {
namespace {

// Relative L2 against the float64 reference rounded to the dtype: float32
// convs may run on TF32 tensor cores (the default, as in PyTorch).
double Bound(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 2e-3;
    case DType::kFloat16:
      return 1e-2;
    case DType::kBFloat16:
      return 2e-2;
  }
  return 0;
}

constexpr int kKnobBudget = 8;

// A square `kernel` x `kernel` layer with stride `stride`, padded by
// kernel / 2 on every side, with ReLU: the layers this test draws.
LayerCase Square(int64_t kernel, int64_t stride) {
  LayerCase c;
  c.kernel_h = c.kernel_w = kernel;
  c.stride_h = c.stride_w = stride;
  c.pad_top = c.pad_bottom = c.pad_left = c.pad_right = kernel / 2;
  c.activation.kind = ActivationKind::kRelu;
  return c;
}

LayerCase DrawCase(std::mt19937_64* rng) {
  const auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>((*rng)() % static_cast<uint64_t>(hi - lo + 1));
  };
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  const DType dtype = dtypes[pick(0, 2)];
  const bool channels_last = pick(0, 1) == 1;
  const int64_t batch = pick(1, 3);
  // Tensor-core engines want channel counts in multiples of 8 (16-bit) or 4;
  // odd ones take the other engines, so both kinds are drawn.
  const int64_t channels = pick(0, 1) == 1 ? 8 * pick(1, 12) : pick(3, 70);
  const int64_t out_channels = pick(0, 1) == 1 ? 8 * pick(1, 12) : pick(5, 90);
  const int64_t height = pick(5, 29);
  const int64_t width = pick(5, 29);
  const int64_t kernels[] = {1, 3, 5};
  const int64_t kernel = kernels[pick(0, 2)];
  LayerCase c = Square(kernel, pick(1, 2));
  c.dtype = dtype;
  c.channels_last = channels_last;
  c.batch = batch;
  c.channels = channels;
  c.out_channels = out_channels;
  c.height = height;
  c.width = width;
  c.bias = pick(0, 3) != 0;
  return c;
}

std::vector<LayerCase> BenchmarkCases() {
  LayerCase a = Square(3, 1);  // resnet50_7_3x3_512_512, float32, N=1
  a.channels = a.out_channels = 512;
  a.height = a.width = 7;
  LayerCase b = Square(1, 2);  // resnet50_downsample_1x1s2_256_512, float16 NHWC, N=1
  b.dtype = DType::kFloat16;
  b.channels_last = true;
  b.channels = 256;
  b.out_channels = 512;
  b.height = b.width = 56;
  LayerCase c = Square(3, 1);  // resnet50_56_3x3_64_64, float16 NHWC, N=1
  c.dtype = DType::kFloat16;
  c.channels_last = true;
  c.channels = c.out_channels = 64;
  c.height = c.width = 56;
  return {a, b, c};
}


// Same path and engine, and exactly one knob with another value, or set in
// one and left unset (cuDNN's default) in the other.
bool OneKnobApart(const EngineConfigId& a, const EngineConfigId& b) {
  if (a.path != b.path || a.engine != b.engine) return false;
  std::map<int64_t, std::pair<std::optional<int64_t>, std::optional<int64_t>>> knobs;
  for (const auto& [type, value] : a.knobs) knobs[type].first = value;
  for (const auto& [type, value] : b.knobs) knobs[type].second = value;
  int differ = 0;
  for (const auto& [type, values] : knobs) differ += values.first != values.second;
  return differ == 1;
}

// What a search told its observer, in order, and what is in flight: the
// candidate a fault would be blamed on (as the prober and DevicePool's
// in-process observer keep it).
class RecordingObserver : public SearchObserver {
 public:
  void OnTry(const EngineConfigId& id) override {
    tries_[id.ToString()]++;
    in_flight_ = id;
  }
  void OnResult(const CandidateResult& result) override {
    if (result.ok) passed_.insert(result.id.ToString());
    in_flight_.reset();
  }
  const std::map<std::string, int>& tries() const { return tries_; }
  const std::set<std::string>& passed() const { return passed_; }
  const std::optional<EngineConfigId>& in_flight() const { return in_flight_; }

 private:
  std::map<std::string, int> tries_;
  std::set<std::string> passed_;
  std::optional<EngineConfigId> in_flight_;
};

class KnobSearchTest : public CudnnDeviceTest {
 protected:
  // With the shipped errata, as the server searches by default: the
  // search runs in this process, so a configuration they forbid (e.g.
  // engine 71 on a strided channels-first conv under cuDNN 9.14, which
  // seed 20262608's bfloat16 5x5 stride-2 layer met) would kill its context.
  static EngineSelection Autotune(int knob_budget) {
    EngineSelection selection;
    selection.search = EngineSearch::kAutotune;
    selection.autotune_candidates = 4;
    selection.autotune_iterations = 3;
    selection.autotune_knob_candidates = knob_budget;
    absl::StatusOr<std::shared_ptr<const CudnnErrata>> errata = CudnnErrata::Create("");
    EXPECT_TRUE(errata.ok()) << errata.status();
    if (errata.ok()) selection.errata = *errata;
    return selection;
  }

  // Rebuilds `id` by name, runs it into a guarded output (RunGuarded) and
  // returns its relative L2 error, expected within the dtype's bound.
  double RunAgainstReference(const PreparedLayer& layer, ConvLayerPlanner& planner,
                             const EngineConfigId& id) {
    SCOPED_TRACE(absl::StrCat(layer.problem.Describe(), " ", id.ToString()));
    absl::StatusOr<ConvLayerPlan> plan = planner.BuildConfig(layer.problem, id);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return INFINITY;
    const double error = RunGuarded(*plan, layer);
    EXPECT_LE(error, Bound(layer.problem.dtype));
    return error;
  }

  // Every configuration the heuristics list for `problem`, on every path.
  std::vector<EngineConfigId> HeuristicIds(ConvLayerPlanner& planner,
                                           const ConvLayerProblem& problem) {
    std::vector<EngineConfigId> ids;
    for (LayerPath path :
         {LayerPath::kFused, LayerPath::kUnfused, LayerPath::kUnfusedRounding}) {
      absl::StatusOr<CandidateSet> set = planner.Candidates(problem, path);
      if (!set.ok()) continue;
      for (const EngineCandidate& candidate : set->candidates) ids.push_back(candidate.id);
    }
    return ids;
  }

  // The search for `layer` and the results that came from the knob search:
  // those on a cuDNN path that no heuristics list offers.
  struct Search {
    absl::StatusOr<SearchReport> report;
    std::vector<size_t> knob_results;
  };
  // A failed search's status names the candidate in flight, if any (a
  // fault in this process is the candidate's, not the search's).
  Search RunSearch(const PreparedLayer& layer, ConvLayerPlanner& planner,
                   std::optional<ConvLayerPlan>* best) {
    const std::vector<EngineConfigId> listed = HeuristicIds(planner, layer.problem);
    RecordingObserver observer;
    Search search;
    search.report =
        SearchEngines(planner, stream_.get(), layer.problem, SearchOptions(), &observer, best);
    if (!search.report.ok() && observer.in_flight().has_value()) {
      search.report = absl::Status(
          search.report.status().code(),
          absl::StrCat(search.report.status().message(), " (candidate in flight: ",
                       observer.in_flight()->ToString(), ")"));
    }
    if (!search.report.ok()) return search;
    for (size_t r = 0; r < search.report->results.size(); ++r) {
      const EngineConfigId& id = search.report->results[r].id;
      if (id.path != LayerPath::kDirect &&
          std::find(listed.begin(), listed.end(), id) == listed.end()) {
        search.knob_results.push_back(r);
      }
    }
    return search;
  }
};

TEST_F(KnobSearchTest, NeighboursOfTheWinnerRaceAndMatchTheReference) {
  const uint64_t seed = EnvOr("CONVSERVE_KNOB_SEED", 20261126);
  const uint64_t count = EnvOr("CONVSERVE_KNOB_CASES", 12);
  std::mt19937_64 rng(seed);
  std::vector<LayerCase> cases = BenchmarkCases();
  for (uint64_t i = 0; i < count; ++i) cases.push_back(DrawCase(&rng));
  const EngineSelection selection = Autotune(kKnobBudget);
  int tried = 0, passed = 0, won = 0;
  std::map<DType, double> worst;
  for (const LayerCase& c : cases) {
    SCOPED_TRACE(c.Describe());
    const PreparedLayer layer = Prepare(c, &rng);
    ASSERT_TRUE(layer.ok);
    ConvLayerPlanner planner(handle_.get(), selection, target_);
    std::optional<ConvLayerPlan> best;
    const Search search = RunSearch(layer, planner, &best);
    ASSERT_TRUE(search.report.ok()) << search.report.status();
    ASSERT_TRUE(best.has_value());
    const std::vector<CandidateResult>& results = search.report->results;
    const int case_tried = static_cast<int>(search.knob_results.size());
    bool knob_winner = false;
    for (size_t r : search.knob_results) {
      const CandidateResult& result = results[r];
      const bool from_earlier = std::any_of(
          results.begin(), results.begin() + r,
          [&](const CandidateResult& before) { return OneKnobApart(before.id, result.id); });
      EXPECT_TRUE(from_earlier) << result.id.ToString() << " is not one knob from an earlier one";
      if (!result.ok) continue;
      ++passed;
      knob_winner |= result.id == best->id();
      EXPECT_GT(result.ms, 0);
      double& w = worst[c.dtype];
      w = std::max(w, RunAgainstReference(layer, planner, result.id));
    }
    EXPECT_LE(case_tried, kKnobBudget);
    tried += case_tried;
    won += knob_winner;
    const double error = RunAgainstReference(layer, planner, best->id());
    std::printf("%-55s winner %s %.4f ms%s, knob search ran %d; winner relative L2 %.2e\n",
                c.Describe().c_str(), best->id().ToString().c_str(), best->measured_ms(),
                knob_winner ? " (from the knob search)" : "", case_tried, error);
    if (HasFailure()) return;
  }
  std::printf("knob search, seed %llu: %zu layers, %d knob-search candidates run, %d passed and "
              "matched the reference, %d winners from it\n",
              static_cast<unsigned long long>(seed), cases.size(), tried, passed, won);
  for (const auto& [dtype, error] : worst) {
    std::printf("  %s: max relative L2 of the knob-search candidates %.3e (bound %.0e)\n",
                DTypeName(dtype), error, Bound(dtype));
  }
  EXPECT_GT(passed, 0) << "no knob-search candidate ran and passed on any layer";
}

TEST_F(KnobSearchTest, BudgetZeroRunsOnlyTheHeuristicsLists) {
  std::mt19937_64 rng(5);
  const EngineSelection selection = Autotune(0);  // the planner keeps a reference
  for (const LayerCase& c : BenchmarkCases()) {
    SCOPED_TRACE(c.Describe());
    const PreparedLayer layer = Prepare(c, &rng);
    ASSERT_TRUE(layer.ok);
    ConvLayerPlanner planner(handle_.get(), selection, target_);
    const Search search = RunSearch(layer, planner, nullptr);
    ASSERT_TRUE(search.report.ok()) << search.report.status();
    for (size_t r : search.knob_results) {
      ADD_FAILURE() << search.report->results[r].id.ToString() << " is in no heuristics list";
    }
  }
}

TEST_F(KnobSearchTest, AKnobSearchCandidateNamedForReproductionRunsAlone) {
  std::mt19937_64 rng(9);
  const EngineSelection selection = Autotune(kKnobBudget);
  for (const LayerCase& c : BenchmarkCases()) {
    SCOPED_TRACE(c.Describe());
    const PreparedLayer layer = Prepare(c, &rng);
    ASSERT_TRUE(layer.ok);
    ConvLayerPlanner planner(handle_.get(), selection, target_);
    const Search search = RunSearch(layer, planner, nullptr);
    ASSERT_TRUE(search.report.ok()) << search.report.status();
    std::optional<EngineConfigId> neighbour;
    for (size_t r : search.knob_results) {
      if (search.report->results[r].ok) {
        neighbour = search.report->results[r].id;
        break;
      }
    }
    if (!neighbour.has_value()) continue;
    SearchOptions only;
    only.only = neighbour->ToString();
    std::optional<ConvLayerPlan> best;
    absl::StatusOr<SearchReport> alone =
        SearchEngines(planner, stream_.get(), layer.problem, only, nullptr, &best);
    ASSERT_TRUE(alone.ok()) << alone.status();
    ASSERT_EQ(alone->results.size(), 1u);
    EXPECT_EQ(alone->results[0].id, *neighbour);
    EXPECT_TRUE(alone->results[0].ok) << alone->results[0].detail;
    ASSERT_TRUE(best.has_value());
    EXPECT_EQ(best->id(), *neighbour);
    std::printf("%-55s ran %s alone by name\n", c.Describe().c_str(),
                neighbour->ToString().c_str());
    return;
  }
  ADD_FAILURE() << "no benchmark layer had a passing knob-search candidate to name";
}

TEST_F(KnobSearchTest, TheFinalNamesEachFinalistItRunsAndLeavesNoneInFlight) {
  std::mt19937_64 rng(13);
  const EngineSelection selection = Autotune(kKnobBudget);
  int finals = 0;
  for (const LayerCase& c : BenchmarkCases()) {
    SCOPED_TRACE(c.Describe());
    const PreparedLayer layer = Prepare(c, &rng);
    ASSERT_TRUE(layer.ok);
    ConvLayerPlanner planner(handle_.get(), selection, target_);
    RecordingObserver observer;
    absl::StatusOr<SearchReport> report =
        SearchEngines(planner, stream_.get(), layer.problem, SearchOptions(), &observer, nullptr);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_FALSE(observer.in_flight().has_value())
        << observer.in_flight()->ToString() << " is still in flight after the search";
    // Candidates tried more than once are the finalists: once in the first
    // pass, then before binding and before each sample of the final, the
    // same number of times each.
    std::vector<std::string> finalists;
    std::set<int> counts;
    for (const auto& [id, tries] : observer.tries()) {
      if (tries == 1) continue;
      finalists.push_back(id);
      counts.insert(tries);
      EXPECT_EQ(observer.passed().count(id), 1u) << id << " was timed again but never passed";
    }
    if (finalists.empty()) continue;
    ++finals;
    EXPECT_EQ(counts.size(), 1u) << "finalists named unequally often";
    EXPECT_GE(*counts.begin(), 3) << "a finalist named only " << *counts.begin() << " times";
    ASSERT_TRUE(report->chosen.has_value());
    EXPECT_NE(std::find(finalists.begin(), finalists.end(), report->chosen->ToString()),
              finalists.end())
        << "the winner " << report->chosen->ToString() << " was not a finalist";
    std::printf("%-55s final: %zu finalists, each named %d times; winner %s\n",
                c.Describe().c_str(), finalists.size(), *counts.begin(),
                report->chosen->ToString().c_str());
  }
  EXPECT_GT(finals, 0) << "no benchmark layer had two candidates within 10% for a final";
}

// In a child process (the fault ends its CUDA context): searches the
// benchmark layers with the final's fault hook until one has a final, and
// exits 0 when the search returned the lost context with the finalist whose
// sample faulted in flight.
void SearchWithAFaultInTheFinal(cudnnHandle_t handle, cudaStream_t stream,
                                const CudnnTarget& target,
                                const EngineSelection& selection) {
  std::mt19937_64 rng(17);
  for (const LayerCase& c : BenchmarkCases()) {
    absl::StatusOr<std::shared_ptr<const Graph>> graph = MakeLayerGraph(c, &rng);
    if (!graph.ok()) break;
    const Shape input = c.InputShape();
    absl::StatusOr<std::vector<Shape>> outputs = (*graph)->InferShapes(input);
    if (!outputs.ok()) break;
    const ConvLayerProblem problem = MakeLayerProblems(**graph, input, *outputs)[0];
    ConvLayerPlanner planner(handle, selection, target);
    RecordingObserver observer;
    SearchOptions options;
    options.testing_fault_in_final = true;
    absl::StatusOr<SearchReport> report =
        SearchEngines(planner, stream, problem, options, &observer, nullptr);
    if (report.ok()) continue;  // no final on this layer
    if (StickyCudaError(report.status(), stream) == cudaSuccess) {
      std::fprintf(stderr, "the search failed without losing the context: %s\n",
                   std::string(report.status().message()).c_str());
      std::_Exit(1);
    }
    if (!observer.in_flight().has_value()) {
      std::fprintf(stderr, "the fault in the final was blamed on no candidate\n");
      std::_Exit(1);
    }
    // The fault came in the first finalist's first sample: by then it was
    // named once more than any other candidate (once in the first pass, the
    // finalists once each when bound, it once for the sample).
    const std::string id = observer.in_flight()->ToString();
    const int tries = observer.tries().at(id);
    bool most = observer.passed().count(id) > 0;
    for (const auto& [other, other_tries] : observer.tries()) {
      if (other != id && other_tries >= tries) most = false;
    }
    std::fprintf(stderr, "%s: the fault in the final was blamed on %s (named %d times), %s\n",
                 c.Describe().c_str(), id.c_str(), tries,
                 most ? "the finalist that ran" : "not the finalist that ran");
    std::_Exit(most ? 0 : 1);
  }
  std::fprintf(stderr, "no benchmark layer had a final\n");
  std::_Exit(1);
}

TEST_F(KnobSearchTest, AFaultInTheFinalIsBlamedOnTheFinalistThatRan) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(SearchWithAFaultInTheFinal(handle_.get(), stream_.get(), target_,
                                         Autotune(kKnobBudget)),
              ::testing::ExitedWithCode(0), "blamed on .*, the finalist that ran");
}

}  // namespace
}  // namespace convserve
