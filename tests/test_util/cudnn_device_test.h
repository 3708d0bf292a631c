// What the GPU tests that drive the cuDNN layer code directly share: a
// fixture holding device 0's cuDNN target, a stream and a handle on it
// (skipping the test where no CUDA device is visible), a layer case made
// ready to run, a run of one plan into a guarded output against the float64
// reference, an autotune search, and seeds and counts read from the
// environment.
#ifndef CONVSERVE_TESTS_TEST_UTIL_CUDNN_DEVICE_TEST_H_
#define CONVSERVE_TESTS_TEST_UTIL_CUDNN_DEVICE_TEST_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cudnn/candidate_search.h"
#include "engine/cudnn/conv_layer_plan.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/cudnn/device_weights.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/tensor.h"
#include "gtest/gtest.h"
#include "tests/test_util/device_setup.h"
#include "tests/test_util/layer_case.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/random_tensor.h"

namespace convserve {

// The relative L2 bound of the direct path's tensor-core kernels against the
// float64 reference rounded to the dtype: float32 accumulation in another
// order flips the rounding of some elements; float32 inputs are rounded to
// TF32 (10 mantissa bits), the bound cuDNN's TF32 engines are held to
// (docs/cudnn.md).
inline double TensorCoreBound(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 1e-3;
    case DType::kFloat16: return 2e-3;
    case DType::kBFloat16: return 1e-2;
  }
  return 0;
}

class CudnnDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    absl::StatusOr<CudnnVersions> versions = CheckCudnnRuntime(0);
    ASSERT_TRUE(versions.ok()) << versions.status();
    target_ = versions->target();
    absl::StatusOr<CudaStream> stream = CudaStream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = *std::move(stream);
    absl::StatusOr<CudnnHandle> handle = CudnnHandle::Create(stream_.get());
    ASSERT_TRUE(handle.ok()) << handle.status();
    handle_ = *std::move(handle);
  }

  // Guard bytes after an output, and the byte the output and the guard are
  // filled with first: NaN in every dtype, so an element left unwritten
  // fails the comparison.
  static constexpr size_t kGuardBytes = 256;
  static constexpr uint8_t kFill = 0xFF;

  // A layer case ready to run: its graph and problem, a fresh random input
  // (uniform in +-1) on the device, the float64 reference output and the
  // weights on the device. `ok` is false, with a test failure, when a step
  // failed.
  struct PreparedLayer {
    bool ok = false;
    std::shared_ptr<const Graph> graph;
    Shape input_shape;
    ConvLayerProblem problem;
    std::unique_ptr<DeviceWeights> weights;
    DeviceBuffer x;
    std::vector<double> expected;
    size_t output_bytes = 0;
  };
  PreparedLayer Prepare(const LayerCase& c, std::mt19937_64* rng) {
    PreparedLayer layer;
    absl::StatusOr<std::shared_ptr<const Graph>> graph = MakeLayerGraph(c, rng);
    EXPECT_TRUE(graph.ok()) << c.Describe() << ": " << graph.status();
    if (!graph.ok()) return layer;
    layer.graph = *std::move(graph);
    layer.input_shape = c.InputShape();
    absl::StatusOr<std::vector<Shape>> outputs = layer.graph->InferShapes(layer.input_shape);
    EXPECT_TRUE(outputs.ok()) << c.Describe() << ": " << outputs.status();
    if (!outputs.ok()) return layer;
    layer.problem = MakeLayerProblems(*layer.graph, layer.input_shape, *outputs)[0];
    const std::string input = RandomTensor(c.dtype, NumElements(layer.input_shape), 1.0f, rng);
    Shape output_shape;
    layer.expected = NaiveForward(*layer.graph, layer.input_shape, input, &output_shape);
    layer.output_bytes = NumElements(output_shape) * DTypeSize(c.dtype);
    absl::StatusOr<std::unique_ptr<DeviceWeights>> weights =
        DeviceWeights::Upload(*layer.graph, 0, /*tf32_copies=*/true);
    absl::StatusOr<DeviceBuffer> x = DeviceBuffer::Create(input.size());
    EXPECT_TRUE(weights.ok() && x.ok());
    if (!weights.ok() || !x.ok()) return layer;
    layer.weights = *std::move(weights);
    layer.x = *std::move(x);
    EXPECT_EQ(CopyToDevice(layer.x.data(), input.data(), input.size()), cudaSuccess);
    layer.ok = true;
    return layer;
  }

  // RunGuarded on a prepared layer, given the weights' TF32 copy (as a
  // server with TF32 allowed gives it) where `tf32_copy` and there is one.
  double RunGuarded(ConvLayerPlan& plan, const PreparedLayer& layer, bool tf32_copy = true) {
    return RunGuarded(plan, layer.problem, *layer.weights, tf32_copy, layer.x,
                      layer.output_bytes, layer.expected);
  }

  // Builds each of `configs` (named configurations that need no workspace:
  // the direct path's) for `layer` and runs it with RunGuarded, expecting an
  // error within `bound`; returns the largest (infinity when one does not
  // build). A layer whose weights have a TF32 copy runs with it and without.
  double RunWorkspaceFreeConfigs(const PreparedLayer& layer,
                                 const std::vector<EngineConfigId>& configs, double bound,
                                 const std::string& what) {
    EngineSelection selection;
    ConvLayerPlanner planner(handle_.get(), selection, target_);
    double worst = 0;
    for (const EngineConfigId& id : configs) {
      SCOPED_TRACE(what + " " + id.ToString());
      absl::StatusOr<ConvLayerPlan> plan = planner.BuildConfig(layer.problem, id);
      EXPECT_TRUE(plan.ok()) << plan.status();
      if (!plan.ok()) return INFINITY;
      EXPECT_EQ(plan->workspace_bytes(), 0);
      for (bool tf32_copy : {true, false}) {
        if (!tf32_copy && layer.weights->tf32_weights(0) == nullptr) break;
        SCOPED_TRACE(tf32_copy ? "" : "without the weights' TF32 copy");
        const double error = RunGuarded(*plan, layer, tf32_copy);
        EXPECT_LE(error, bound);
        worst = std::max(worst, error);
      }
    }
    return worst;
  }

  // Checks `count` layer cases drawn by `draw(rng)` from `seed` with
  // `check(c, rng)` (which returns the case's largest error), stopping at
  // the first failure (naming the seed and case), and prints the largest
  // error per dtype: "<what>, seed S, N cases: <dtype> max relative L2 E
  // (bound B)", B = bound(dtype).
  template <typename Draw, typename Check, typename Bound>
  void CheckRandomCases(const char* what, uint64_t seed, uint64_t count, Draw draw, Check check,
                        Bound bound) {
    std::mt19937_64 rng(seed);
    std::map<DType, double> worst;
    for (uint64_t i = 0; i < count; ++i) {
      const LayerCase c = draw(&rng);
      double& w = worst[c.dtype];
      w = std::max(w, check(c, &rng));
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "seed " << seed << " case " << i << ": " << c.Describe();
        return;
      }
    }
    for (const auto& [dtype, error] : worst) {
      std::printf("%s, seed %llu, %llu cases: %s max relative L2 %.3e (bound %.0e)\n", what,
                  static_cast<unsigned long long>(seed), static_cast<unsigned long long>(count),
                  DTypeName(dtype), error, bound(dtype));
    }
  }

  // The autotune search of `problem`, convserve's own kernels raced
  // (`direct`) or not; its winner in `best`.
  absl::StatusOr<SearchReport> Autotune(const ConvLayerProblem& problem, bool direct,
                                        std::optional<ConvLayerPlan>* best,
                                        const SearchOptions& options = SearchOptions()) {
    EngineSelection selection;
    selection.search = EngineSearch::kAutotune;
    selection.direct_kernels = direct;
    ConvLayerPlanner planner(handle_.get(), selection, target_);
    return SearchEngines(planner, stream_.get(), problem, options, nullptr, best);
  }

  // What autotune's race of the direct path against cuDNN found for a
  // layer: the direct candidates tried (each expected to be of one of
  // `engines`, to pass and to take some time), the best time on each side,
  // each direct candidate's time ("id=ms ...") and the winner.
  struct DirectRace {
    size_t tried = 0;
    float best_direct = INFINITY, best_cudnn = INFINITY;
    std::string times;
    std::optional<ConvLayerPlan> best;
  };
  DirectRace RaceDirect(const ConvLayerProblem& problem, const std::vector<int64_t>& engines,
                        bool direct) {
    DirectRace race;
    absl::StatusOr<SearchReport> report = Autotune(problem, direct, &race.best);
    EXPECT_TRUE(report.ok()) << problem.Describe() << ": " << report.status();
    if (!report.ok()) return race;
    for (const CandidateResult& result : report->results) {
      if (result.id.path != LayerPath::kDirect) {
        if (result.ok) race.best_cudnn = std::min(race.best_cudnn, result.ms);
        continue;
      }
      ++race.tried;
      EXPECT_NE(std::find(engines.begin(), engines.end(), result.id.engine), engines.end())
          << result.id.ToString();
      EXPECT_TRUE(result.ok) << result.id.ToString() << ": " << result.detail;
      EXPECT_GT(result.ms, 0) << result.id.ToString();
      if (result.ok) race.best_direct = std::min(race.best_direct, result.ms);
      absl::StrAppend(&race.times, " ", result.id.ToString(), "=",
                      absl::StrFormat("%.4f", result.ms));
    }
    return race;
  }

  // Prepares `c` and runs every direct configuration of engine `engine`
  // (expecting `count` of them) into guarded outputs against the float64
  // reference (RunWorkspaceFreeConfigs); returns the largest relative L2
  // error.
  double RunEngineConfigs(const LayerCase& c, std::mt19937_64* rng, int64_t engine,
                          size_t count) {
    const PreparedLayer layer = Prepare(c, rng);
    if (!layer.ok) return INFINITY;
    std::vector<EngineConfigId> configs;
    for (const EngineConfigId& id : DirectConvConfigs(layer.problem)) {
      if (id.engine == engine) configs.push_back(id);
    }
    EXPECT_EQ(configs.size(), count)
        << layer.problem.Describe() << ": " << DirectConvRejection(layer.problem);
    return RunWorkspaceFreeConfigs(layer, configs, TensorCoreBound(c.dtype), c.Describe());
  }

  // ResNet-50's layers `cases(batch, dtype)` at batch 1 and 2, in each of
  // `dtypes`, through `check(c, rng)` (which returns the largest relative
  // L2 error), each printed as "`label` NAME DTYPE N=n max relative L2 e";
  // stops at the first failure.
  template <typename Cases, typename Check>
  void CheckResNetCases(const char* label, const Cases& cases, const Check& check,
                        const std::vector<DType>& dtypes = {DType::kFloat16, DType::kBFloat16}) {
    std::mt19937_64 rng(7);
    for (DType dtype : dtypes) {
      for (int64_t batch : {1, 2}) {
        for (const LayerCase& c : cases(batch, dtype)) {
          const double error = check(c, &rng);
          std::printf("%s %-24s %-8s N=%lld max relative L2 %.3e\n", label, c.name.c_str(),
                      DTypeName(dtype), static_cast<long long>(batch), error);
          if (HasFailure()) return;
        }
      }
    }
  }

  // Autotune's race (RaceDirect, direct engines `engines`) on each of
  // `cases` at batch 1 and 32: each race must time a configuration named
  // by each prefix in `expected`. Prints the winner, each side's best and
  // every direct candidate's time.
  void RaceResNetCases(const std::vector<LayerCase>& cases, const std::vector<int64_t>& engines,
                       const std::vector<std::string>& expected) {
    std::mt19937_64 rng(17);
    for (const LayerCase& c : cases) {
      const PreparedLayer layer = Prepare(c, &rng);
      ASSERT_TRUE(layer.ok);
      for (int64_t batch : {1, 32}) {
        // The race needs the problem only (no reference at batch 32).
        ConvLayerProblem problem = layer.problem;
        problem.input[0] = problem.output[0] = batch;
        const DirectRace race = RaceDirect(problem, engines, true);
        ASSERT_TRUE(race.best.has_value());
        for (const std::string& prefix : expected) {
          EXPECT_NE(race.times.find(" " + prefix), std::string::npos) << race.times;
        }
        std::printf("race %-24s N=%-3lld winner %-24s %.4f ms; best direct %.4f ms, best cuDNN "
                    "%.4f ms\nrace %-24s N=%-3lld direct ms:%s\n",
                    c.name.c_str(), static_cast<long long>(batch),
                    race.best->id().ToString().c_str(), race.best->measured_ms(),
                    race.best_direct, race.best_cudnn, c.name.c_str(),
                    static_cast<long long>(batch), race.times.c_str());
      }
    }
  }

  // Runs `plan` for `problem` (layer 0 of `weights`' graph) on input `x`
  // into a NaN-filled output of `output_bytes` with kGuardBytes after it;
  // expects no guard byte written and returns the relative L2 error against
  // `expected` (infinity when a step failed, which also fails the test).
  double RunGuarded(ConvLayerPlan& plan, const ConvLayerProblem& problem,
                    const DeviceWeights& weights, bool tf32_copy, const DeviceBuffer& x,
                    size_t output_bytes, const std::vector<double>& expected) {
    absl::StatusOr<DeviceBuffer> y = DeviceBuffer::Create(output_bytes + kGuardBytes);
    absl::StatusOr<DeviceBuffer> workspace =
        DeviceBuffer::Create(std::max<int64_t>(plan.workspace_bytes(), 256));
    EXPECT_TRUE(y.ok() && workspace.ok());
    if (!y.ok() || !workspace.ok()) return INFINITY;
    EXPECT_EQ(FillDevice(y->data(), kFill, y->bytes()), cudaSuccess);
    ConvLayerBuffers buffers;
    buffers.x = x.data();
    buffers.w = weights.weights(0);
    if (tf32_copy) buffers.w_tf32 = weights.tf32_weights(0);
    buffers.w_narrow = weights.narrow_weights(0);
    buffers.bias = weights.bias(0);
    buffers.y = y->data();
    buffers.workspace = workspace->data();
    absl::Status ran = plan.Bind(problem, buffers);
    if (ran.ok()) ran = plan.RunBound(handle_.get(), stream_.get(), problem);
    EXPECT_TRUE(ran.ok()) << ran;
    return ReadGuarded(*y, output_bytes, problem.dtype, expected, ran.ok());
  }

  // After a run on the stream into `y` (an output of `output_bytes`, then
  // kGuardBytes of guard, all filled with kFill first): waits for it,
  // expects no guard byte written and returns the relative L2 error of the
  // output against `expected` (infinity when the run failed, `ran` false).
  double ReadGuarded(const DeviceBuffer& y, size_t output_bytes, DType dtype,
                     const std::vector<double>& expected, bool ran) {
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    std::string actual(output_bytes + kGuardBytes, '\0');
    EXPECT_EQ(cudaMemcpy(actual.data(), y.data(), actual.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    size_t overwritten = 0;
    for (size_t i = output_bytes; i < actual.size(); ++i) {
      overwritten += static_cast<uint8_t>(actual[i]) != kFill;
    }
    EXPECT_EQ(overwritten, 0u) << "bytes written past the output";
    actual.resize(output_bytes);
    if (!ran) return INFINITY;
    return RelativeL2Error(DecodeToDouble(dtype, actual), expected);
  }

  CudnnTarget target_;
  CudaStream stream_;
  CudnnHandle handle_;
};

// The unsigned integer in environment variable `name`, or `fallback`.
inline uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 10) : fallback;
}

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_CUDNN_DEVICE_TEST_H_
