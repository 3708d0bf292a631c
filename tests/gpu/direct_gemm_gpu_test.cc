// The direct path's implicit GEMM (engine 1 of engine/cudnn/direct_conv.h)
// against the float64 reference, layer by layer:
// - seeded random dense layers: float16, bfloat16 and float32 (TF32) NHWC,
//   C a multiple of one step's channels (32; 16 for float32) and K of 8,
//   batch 1-3, odd sizes, rectangular kernels 1-5, strides 1-3, dilations
//   1-2, asymmetric padding, every activation, with and without bias;
// - ResNet-50's dense layers of tests/bench/conv_shapes.csv at batch 1 and
//   2, float16 and float32;
// each under every GEMM configuration (every split of the reduction across
// a cluster), into an output filled with NaN and followed by guard bytes:
// every element must be written, none past the end.
// Then the engine search: autotune races the GEMM against cuDNN on the
// batch-1 layers (float16 and float32; the pointwise GEMM's candidates
// join it on the float16 1x1 layers on 64 channels, the halo GEMM's on the
// float16 3x3 layers on 64 and 128), every direct candidate
// passes the prober's guarded-buffer checks, and the line per layer shows
// both sides' best time;
// --direct_kernels=false keeps it out. Skips without a GPU; on a GPU without
// clusters the configurations are refused (ConfigRejection) and the
// launches fail with FAILED_PRECONDITION, which this test expects.
//
// CONVSERVE_GEMM_SEED and CONVSERVE_GEMM_CASES change the random layers;
// CONVSERVE_GEMM_LAYER, a ResNet layer's name, runs that one alone (for a
// profiler).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/cudnn/candidate_search.h"
#include "engine/cudnn/direct_conv.h"
#include "gtest/gtest.h"
#include "tests/test_util/cudnn_device_test.h"

namespace convserve {
namespace {

constexpr DType kDtypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32};

// A random layer the GEMM runs, with at least one output element.
LayerCase DrawCase(std::mt19937_64* rng) {
  const auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>((*rng)() % static_cast<uint64_t>(hi - lo + 1));
  };
  for (;;) {
    LayerCase c;
    c.dtype = kDtypes[pick(0, 2)];
    c.channels_last = true;
    c.batch = pick(1, 3);
    c.channels = DirectGemmChunk(c.dtype) * pick(1, 6);
    c.out_channels = 8 * pick(1, 20);
    c.height = pick(1, 23);
    c.width = pick(1, 23);
    c.kernel_h = pick(1, 5);
    c.kernel_w = pick(1, 5);
    c.stride_h = pick(1, 3);
    c.stride_w = pick(1, 3);
    c.dilation_h = pick(1, 2);
    c.dilation_w = pick(1, 2);
    c.pad_top = pick(0, c.kernel_h);
    c.pad_bottom = pick(0, c.kernel_h);
    c.pad_left = pick(0, c.kernel_w);
    c.pad_right = pick(0, c.kernel_w);
    c.bias = pick(0, 3) != 0;
    c.activation = DrawActivation(rng);
    if (c.HasOutput()) return c;
  }
}

// ResNet-50's dense layers of tests/bench/conv_shapes.csv but the stem
// (3 input channels), with bias and ReLU, at `batch`.
std::vector<LayerCase> ResNetCases(int64_t batch, DType dtype) {
  struct Shape {
    const char* name;
    int64_t channels, out_channels, size, kernel, stride;
  };
  static constexpr Shape kShapes[] = {
      {"resnet50_56_1x1_64_64", 64, 64, 56, 1, 1},
      {"resnet50_56_3x3_64_64", 64, 64, 56, 3, 1},
      {"resnet50_56_1x1_64_256", 64, 256, 56, 1, 1},
      {"resnet50_56_1x1_256_64", 256, 64, 56, 1, 1},
      {"resnet50_downsample_1x1s2_256_512", 256, 512, 56, 1, 2},
      {"resnet50_28_3x3_128_128", 128, 128, 28, 3, 1},
      {"resnet50_28_1x1_128_512", 128, 512, 28, 1, 1},
      {"resnet50_28_1x1_512_128", 512, 128, 28, 1, 1},
      {"resnet50_14_3x3_256_256", 256, 256, 14, 3, 1},
      {"resnet50_14_1x1_256_1024", 256, 1024, 14, 1, 1},
      {"resnet50_14_1x1_1024_256", 1024, 256, 14, 1, 1},
      {"resnet50_7_3x3_512_512", 512, 512, 7, 3, 1},
      {"resnet50_7_1x1_512_2048", 512, 2048, 7, 1, 1},
      {"resnet50_7_1x1_2048_512", 2048, 512, 7, 1, 1},
  };
  const char* only = std::getenv("CONVSERVE_GEMM_LAYER");
  std::vector<LayerCase> cases;
  for (const Shape& s : kShapes) {
    if (only != nullptr && *only != '\0' && std::string(only) != s.name) continue;
    LayerCase c;
    c.name = s.name;
    c.dtype = dtype;
    c.channels_last = true;
    c.batch = batch;
    c.channels = s.channels;
    c.out_channels = s.out_channels;
    c.height = c.width = s.size;
    c.kernel_h = c.kernel_w = s.kernel;
    c.stride_h = c.stride_w = s.stride;
    c.pad_top = c.pad_bottom = c.pad_left = c.pad_right = s.kernel / 2;
    c.activation.kind = ActivationKind::kRelu;
    cases.push_back(c);
  }
  return cases;
}

class DirectGemmTest : public CudnnDeviceTest {
 protected:
  bool HasClusters() const { return target_.compute_capability >= kDirectGemmComputeCapability; }

  // Runs every GEMM configuration of `c` and checks each output; returns
  // the largest relative L2 error.
  double CheckCase(const LayerCase& c, std::mt19937_64* rng) {
    const PreparedLayer layer = Prepare(c, rng);
    if (!layer.ok) return INFINITY;
    const ConvLayerProblem& problem = layer.problem;
    const std::vector<EngineConfigId> configs = DirectConvConfigs(problem);
    EXPECT_FALSE(configs.empty()) << problem.Describe() << ": " << DirectConvRejection(problem);

    // The pointwise and halo GEMMs' configurations come with the GEMM's for
    // the 1x1 and 3x3 layers they run (direct_pointwise_gpu_test and
    // direct_halo_gpu_test check them).
    std::vector<EngineConfigId> gemm;
    for (const EngineConfigId& id : configs) {
      EXPECT_TRUE(id.engine == kDirectGemmEngine || id.engine == kDirectPointwiseEngine ||
                  id.engine == kDirectHaloEngine)
          << id.ToString();
      if (id.engine == kDirectGemmEngine) gemm.push_back(id);
    }
    if (HasClusters()) {
      return RunWorkspaceFreeConfigs(layer, gemm, TensorCoreBound(c.dtype), c.Describe());
    }
    // Refused by the selection; built by name anyway, the launch refuses.
    EngineSelection selection;
    ConvLayerPlanner planner(handle_.get(), selection, target_);
    for (const EngineConfigId& id : gemm) {
      absl::StatusOr<ConvLayerPlan> plan = planner.BuildConfig(problem, id);
      EXPECT_TRUE(plan.ok()) << plan.status();
      if (!plan.ok()) return INFINITY;
      EXPECT_EQ(plan->Bind(problem, {layer.x.data(), layer.weights->weights(0),
                                     layer.weights->bias(0), layer.x.data(), nullptr}),
                absl::OkStatus());
      EXPECT_EQ(plan->RunBound(handle_.get(), stream_.get(), problem).code(),
                absl::StatusCode::kFailedPrecondition);
    }
    return 0;
  }
};

TEST_F(DirectGemmTest, RandomDenseLayersMatchTheReference) {
  CheckRandomCases(
      "direct gemm", EnvOr("CONVSERVE_GEMM_SEED", 20261127), EnvOr("CONVSERVE_GEMM_CASES", 60),
      DrawCase, [this](const LayerCase& c, std::mt19937_64* rng) { return CheckCase(c, rng); },
      TensorCoreBound);
}

TEST_F(DirectGemmTest, ResNetLayersMatchTheReference) {
  std::mt19937_64 rng(5);
  for (DType dtype : {DType::kFloat16, DType::kFloat32}) {
    for (int64_t batch : {1, 2}) {
      for (const LayerCase& c : ResNetCases(batch, dtype)) {
        const double error = CheckCase(c, &rng);
        std::printf("direct gemm %-70s N=%lld max relative L2 %.3e\n", c.Describe().c_str(),
                    static_cast<long long>(batch), error);
        if (HasFailure()) return;
      }
    }
  }
}

// The search under autotune runs every direct candidate on the prober's
// guarded buffers (fresh random data, output checked fully written, guards
// intact) and times it against cuDNN's; with direct_kernels off, none is
// tried.
TEST_F(DirectGemmTest, AutotuneRacesTheImplicitGemm) {
  if (!HasClusters()) GTEST_SKIP() << "no thread-block clusters on this GPU";
  std::mt19937_64 rng(13);
  int won = 0, layers = 0;
  std::vector<LayerCase> cases = ResNetCases(1, DType::kFloat16);
  for (const LayerCase& c : ResNetCases(1, DType::kFloat32)) cases.push_back(c);
  for (const LayerCase& c : cases) {
    const PreparedLayer layer = Prepare(c, &rng);
    ASSERT_TRUE(layer.ok);
    const size_t configs = DirectConvConfigs(layer.problem).size();
    const size_t raced = std::min<size_t>(configs, EngineSelection().autotune_candidates);
    for (bool direct : {true, false}) {
      const DirectRace race = RaceDirect(
          layer.problem, {kDirectGemmEngine, kDirectPointwiseEngine, kDirectHaloEngine}, direct);
      EXPECT_EQ(race.tried, direct ? raced : 0u) << c.Describe();
      ASSERT_TRUE(race.best.has_value());
      if (direct) {
        ++layers;
        won += race.best->path() == LayerPath::kDirect;
        std::printf(
            "race %-36s %-7s winner %-24s %.4f ms; best direct %.4f ms, best cuDNN %.4f ms\n",
            c.name.c_str(), DTypeName(c.dtype), race.best->id().ToString().c_str(),
            race.best->measured_ms(), race.best_direct, race.best_cudnn);
        std::printf("race %-36s %-7s direct ms:%s\n", c.name.c_str(), DTypeName(c.dtype),
                    race.times.c_str());
      } else {
        EXPECT_NE(race.best->path(), LayerPath::kDirect);
      }
    }
  }
  std::printf(
      "race: the direct path (implicit, pointwise or halo GEMM) won %d of %d batch-1 layers\n", won,
      layers);
}

}  // namespace
}  // namespace convserve
