// The direct path's depthwise kernel (engine/cudnn/direct_conv.h) against the
// float64 reference, layer by layer: seeded random depthwise layers (every
// dtype and layout, odd and even channel counts, odd sizes, strides,
// dilations, asymmetric padding wider than the window, every activation,
// with and without bias) plus the benchmark's MobileNetV2 shapes, each run
// under every direct configuration into an output filled with NaN and
// followed by guard bytes: every element must be written, none past the end.
// Then the engine search: autotune races the direct path and every direct
// candidate passes the prober's guarded-buffer checks; --direct_kernels=false
// keeps it out. And the shared memory a launch of one tile a block asks
// for, so that no two of its blocks share an SM. Skips without a GPU.
//
// CONVSERVE_DIRECT_SEED and CONVSERVE_DIRECT_CASES change the random cases.
#include <cuda_runtime_api.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/candidate_search.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/direct_conv_kernel.h"
#include "gtest/gtest.h"
#include "tests/test_util/cudnn_device_test.h"

namespace convserve {
namespace {

// Relative L2 against the float64 reference, whose output is rounded to the
// dtype too: float32 is exact FMA accumulation (no TF32); 16-bit outputs
// differ by a rounding flip on some elements.
double Bound(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 1e-5;
    case DType::kFloat16:
      return 2e-3;
    case DType::kBFloat16:
      return 1e-2;
  }
  return 0;
}


// A random depthwise layer with at least one output element.
LayerCase DrawCase(std::mt19937_64* rng) {
  const auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>((*rng)() % static_cast<uint64_t>(hi - lo + 1));
  };
  static constexpr int64_t kChannels[] = {1,  2,  3,  4,  5,  6,  7,   8,   12,  15,
                                          16, 24, 31, 32, 40, 64, 96, 144, 257, 520};
  static constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  for (;;) {
    LayerCase c;
    c.dtype = kDtypes[pick(0, 2)];
    c.channels_last = pick(0, 1) == 1;
    c.channels = kChannels[pick(0, std::size(kChannels) - 1)];
    c.out_channels = c.groups = c.channels;
    c.batch = pick(1, c.channels > 100 ? 2 : 4);
    c.height = pick(1, 29);
    c.width = pick(1, 29);
    c.kernel_h = pick(1, 7);
    c.kernel_w = pick(1, 7);
    c.stride_h = pick(1, 3);
    c.stride_w = pick(1, 3);
    c.dilation_h = pick(1, 2);
    c.dilation_w = pick(1, 2);
    const int64_t extent_h = (c.kernel_h - 1) * c.dilation_h + 1;
    const int64_t extent_w = (c.kernel_w - 1) * c.dilation_w + 1;
    c.pad_top = pick(0, extent_h);
    c.pad_bottom = pick(0, extent_h);
    c.pad_left = pick(0, extent_w);
    c.pad_right = pick(0, extent_w);
    c.bias = pick(0, 3) != 0;
    c.activation = DrawActivation(rng);
    if (c.HasOutput()) return c;
  }
}

// The MobileNetV2 depthwise layers of tests/bench/conv_shapes.csv (batch 2)
// and a 5x5 stride-2 one, each in both layouts and every dtype.
std::vector<LayerCase> BenchmarkCases() {
  std::vector<LayerCase> cases;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (bool channels_last : {false, true}) {
      for (auto [channels, size, kernel, stride] :
           std::vector<std::array<int64_t, 4>>{{144, 56, 3, 1}, {32, 112, 3, 1}, {96, 28, 5, 2}}) {
        LayerCase c;
        c.dtype = dtype;
        c.channels_last = channels_last;
        c.batch = 2;
        c.channels = c.out_channels = c.groups = channels;
        c.height = c.width = size;
        c.kernel_h = c.kernel_w = kernel;
        c.stride_h = c.stride_w = stride;
        c.pad_top = c.pad_bottom = c.pad_left = c.pad_right = kernel / 2;
        c.activation.kind = ActivationKind::kRelu;
        c.activation.has_upper_clip = true;
        c.activation.upper_clip = 6.0f;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

class DirectConvTest : public CudnnDeviceTest {
 protected:
  // Runs every direct configuration of `c` and checks each output; returns
  // the largest relative L2 error.
  double CheckCase(const LayerCase& c, std::mt19937_64* rng) {
    const PreparedLayer layer = Prepare(c, rng);
    if (!layer.ok) return INFINITY;
    const ConvLayerProblem& problem = layer.problem;
    const std::vector<EngineConfigId> configs = DirectConvConfigs(problem);
    EXPECT_EQ(configs.size(), c.channels_last ? 6u : 3u)
        << problem.Describe() << ": " << DirectConvRejection(problem);

    return RunWorkspaceFreeConfigs(layer, configs, Bound(c.dtype), c.Describe());
  }
};

TEST_F(DirectConvTest, RandomDepthwiseLayersMatchTheReference) {
  CheckRandomCases(
      "direct depthwise", EnvOr("CONVSERVE_DIRECT_SEED", 20261125),
      EnvOr("CONVSERVE_DIRECT_CASES", 150), DrawCase,
      [this](const LayerCase& c, std::mt19937_64* rng) { return CheckCase(c, rng); }, Bound);
}

TEST_F(DirectConvTest, BenchmarkShapesMatchTheReference) {
  std::mt19937_64 rng(7);
  for (const LayerCase& c : BenchmarkCases()) {
    const double error = CheckCase(c, &rng);
    std::printf("%-60s max relative L2 %.3e\n", c.Describe().c_str(), error);
    if (HasFailure()) return;
  }
}

// The search under autotune runs every direct candidate on the prober's
// guarded buffers (fresh random data, output checked fully written, guards
// intact) and times it; with direct_kernels off, none is tried.
TEST_F(DirectConvTest, AutotuneRacesTheDirectPath) {
  std::mt19937_64 rng(11);
  for (const LayerCase& c : BenchmarkCases()) {
    if (c.stride_h != 1) continue;
    const PreparedLayer layer = Prepare(c, &rng);
    ASSERT_TRUE(layer.ok);
    const ConvLayerProblem& problem = layer.problem;
    for (bool direct : {true, false}) {
      std::optional<ConvLayerPlan> best;
      absl::StatusOr<SearchReport> report = Autotune(problem, direct, &best);
      ASSERT_TRUE(report.ok()) << problem.Describe() << ": " << report.status();
      int direct_passed = 0, direct_tried = 0;
      for (const CandidateResult& result : report->results) {
        if (result.id.path != LayerPath::kDirect) continue;
        ++direct_tried;
        EXPECT_TRUE(result.ok) << result.id.ToString() << ": " << result.detail;
        EXPECT_GT(result.ms, 0) << result.id.ToString();
        direct_passed += result.ok;
      }
      EXPECT_EQ(direct_tried, direct ? (c.channels_last ? 6 : 3) : 0) << problem.Describe();
      ASSERT_TRUE(best.has_value());
      if (direct) {
        std::printf("%-60s winner %s %.4f ms (direct candidates passed: %d)\n",
                    c.Describe().c_str(), best->id().ToString().c_str(), best->measured_ms(),
                    direct_passed);
      } else {
        EXPECT_NE(best->path(), LayerPath::kDirect);
      }
    }
  }
}

TEST_F(DirectConvTest, BindRejectsWhatTheKernelCannotRun) {
  std::mt19937_64 rng(3);
  LayerCase c;
  c.channels = c.out_channels = c.groups = 8;
  c.height = c.width = 9;
  const PreparedLayer layer = Prepare(c, &rng);
  ASSERT_TRUE(layer.ok);
  const ConvLayerProblem& problem = layer.problem;
  ConvLayerPlanner planner(handle_.get(), EngineSelection(), target_);
  absl::StatusOr<ConvLayerPlan> plan = planner.BuildConfig(problem, DirectConvConfigs(problem)[0]);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Create(1 << 16);
  ASSERT_TRUE(buffer.ok());
  char* base = static_cast<char*>(buffer->data());
  ConvLayerBuffers misaligned{base + 8, base + 4096, base + 8192, base + 12288, nullptr};
  absl::Status bound = plan->Bind(problem, misaligned);
  EXPECT_EQ(bound.code(), absl::StatusCode::kInvalidArgument) << bound;
  EXPECT_FALSE(plan->IsBoundTo(misaligned));
  EXPECT_EQ(plan->RunBound(handle_.get(), stream_.get(), problem).code(),
            absl::StatusCode::kInternal);

  EngineConfigId unknown = DirectConvConfigs(problem)[0];
  unknown.knobs[0] = {kDirectKnobColumns, 3};
  EXPECT_EQ(planner.BuildConfig(problem, unknown).status().code(), absl::StatusCode::kNotFound);
  ConvLayerProblem dense = problem;
  dense.weights[1] = 2;
  dense.input[1] = 16;
  EXPECT_EQ(planner.BuildConfig(dense, DirectConvConfigs(problem)[0]).status().code(),
            absl::StatusCode::kNotFound);
}

// SpreadSharedBytes: a grid of one tile a block that fits on the SMs one a
// block asks for more than half an SM's shared memory (so blocks placed
// early, a dependent launch's, never double up); other grids ask for what
// a block needs.
TEST_F(DirectConvTest, GridsOfOneTileABlockTakeAnSmEach) {
  int device = 0, sms = 0, per_sm = 0, reserved = 0, per_block = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
            cudaSuccess);
  const int spread = SpreadSharedBytes(1024, sms, sms);
  std::printf("%d SMs of %d bytes (%d reserved a block): one tile a block asks for %d\n", sms,
              per_sm, reserved, spread);
  EXPECT_GT(2 * (spread + reserved), per_sm);
  EXPECT_LE(spread + reserved, per_sm);
  EXPECT_LE(spread, per_block);
  EXPECT_EQ(SpreadSharedBytes(1024, 7, 5), spread);
  EXPECT_EQ(SpreadSharedBytes(per_block, 7, 5), per_block);  // more already
  EXPECT_EQ(SpreadSharedBytes(1024, sms + 1, sms + 1), 1024);  // over one wave
  EXPECT_EQ(SpreadSharedBytes(1024, sms, 2 * sms), 1024);      // blocks loop over tiles
}

}  // namespace
}  // namespace convserve
