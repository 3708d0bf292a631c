// The direct path's narrow implicit GEMM (engine 2 of
// engine/cudnn/direct_conv.h) against the float64 reference, layer by
// layer:
// - seeded random dense layers with short kernel rows: float16, bfloat16 and
//   float32 (TF32) NHWC, 1-8 input channels (odd counts too, so 16-bit rows
//   start at odd elements), S*C up to the engine's 48, K a multiple of 8 up
//   to 96 (two channel tiles), batch 1-3, odd sizes up to 90 columns (several
//   tiles a row), kernels 1-7, strides 1-3, dilation 1-2 along H, asymmetric
//   padding, every activation, with and without bias;
// - ResNet-50's stem (7x7 stride 2 on 3 channels, 224x224) at batch 1 and
//   2 in the three dtypes, and with an infinity in the input (a masked
//   element must not turn its neighbours' outputs into NaN);
// each under every configuration, into an output filled with NaN and
// followed by guard bytes: every element must be written, none past the end.
// Then autotune races the engine against cuDNN on the stem (float16 and
// float32, batch 1 and 4) and prints both sides' best time;
// --direct_kernels=false keeps it out. Skips without a GPU.
//
// CONVSERVE_NARROW_SEED and CONVSERVE_NARROW_CASES change the random layers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/cudnn/candidate_search.h"
#include "engine/cudnn/direct_conv.h"
#include "gtest/gtest.h"
#include "tests/test_util/cudnn_device_test.h"
#include "tests/test_util/device_setup.h"

namespace convserve {
namespace {

constexpr DType kDtypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32};

// A random layer the narrow GEMM runs, with at least one output element.
LayerCase DrawCase(std::mt19937_64* rng) {
  const auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>((*rng)() % static_cast<uint64_t>(hi - lo + 1));
  };
  for (;;) {
    LayerCase c;
    c.dtype = kDtypes[pick(0, 2)];
    c.channels_last = true;
    c.batch = pick(1, 3);
    c.channels = pick(1, 8);
    c.out_channels = 8 * pick(1, 12);
    c.height = pick(1, 30);
    c.width = pick(1, 90);
    c.kernel_h = pick(1, 7);
    c.kernel_w = pick(1, std::min<int64_t>(7, kDirectNarrowMaxRow / c.channels));
    c.stride_h = pick(1, 3);
    c.stride_w = pick(1, 3);
    c.dilation_h = pick(1, 2);
    c.pad_top = pick(0, c.kernel_h);
    c.pad_bottom = pick(0, c.kernel_h);
    c.pad_left = pick(0, c.kernel_w);
    c.pad_right = pick(0, c.kernel_w);
    c.bias = pick(0, 3) != 0;
    c.activation = DrawActivation(rng);
    if (c.HasOutput()) return c;
  }
}

// ResNet-50's stem with bias and ReLU at `batch`.
LayerCase StemCase(int64_t batch, DType dtype) {
  LayerCase c;
  c.name = "resnet50_stem_7x7s2";
  c.dtype = dtype;
  c.channels_last = true;
  c.batch = batch;
  c.channels = 3;
  c.out_channels = 64;
  c.height = c.width = 224;
  c.kernel_h = c.kernel_w = 7;
  c.stride_h = c.stride_w = 2;
  c.pad_top = c.pad_bottom = c.pad_left = c.pad_right = 3;
  c.activation.kind = ActivationKind::kRelu;
  return c;
}

bool IsNarrow(const EngineConfigId& id) {
  return id.path == LayerPath::kDirect && id.engine == kDirectNarrowEngine;
}

class DirectNarrowTest : public CudnnDeviceTest {
 protected:
  void SetUp() override {
    CudnnDeviceTest::SetUp();
    if (IsSkipped()) return;
    if (target_.compute_capability < kDirectNarrowComputeCapability) {
      GTEST_SKIP() << "the narrow GEMM needs compute capability 8.0";
    }
  }

  // Runs every configuration of `layer` and checks each output; returns
  // the largest relative L2 error. A drawn layer whose staged rows do not
  // fit in shared memory even for 64-pixel tiles (float32, 8 channels,
  // dilated 7-row kernels on wide rows: seed 20262208 case 62 needed 234,672
  // bytes) must be refused for that reason alone, and is counted in
  // `refused_`.
  double CheckLayer(const PreparedLayer& layer, const std::string& what) {
    if (!layer.ok) return INFINITY;
    const std::vector<EngineConfigId> configs = DirectConvConfigs(layer.problem);
    if (configs.empty() && layer.problem.channels_last &&
        DirectNarrowLayoutOf(layer.problem, 64).shared_bytes > kDirectMaxSharedBytes) {
      EXPECT_NE(DirectConvRejection(layer.problem).find("bytes of shared memory, over"),
                std::string::npos)
          << DirectConvRejection(layer.problem);
      ++refused_;
      return 0;
    }
    // Both tile sizes, or 64 alone where 128 pixels' rows do not fit.
    EXPECT_FALSE(configs.empty()) << layer.problem.Describe() << ": "
                                  << DirectConvRejection(layer.problem);
    for (const EngineConfigId& id : configs) EXPECT_TRUE(IsNarrow(id)) << id.ToString();
    return RunWorkspaceFreeConfigs(layer, configs, TensorCoreBound(layer.problem.dtype), what);
  }

  int refused_ = 0;
};

TEST_F(DirectNarrowTest, RandomShortRowLayersMatchTheReference) {
  CheckRandomCases(
      "direct narrow", EnvOr("CONVSERVE_NARROW_SEED", 20261127),
      EnvOr("CONVSERVE_NARROW_CASES", 90), DrawCase,
      [this](const LayerCase& c, std::mt19937_64* rng) {
        return CheckLayer(Prepare(c, rng), c.Describe());
      },
      TensorCoreBound);
  std::printf("direct narrow: %d drawn layers refused for shared memory\n", refused_);
}

TEST_F(DirectNarrowTest, TheStemMatchesTheReference) {
  std::mt19937_64 rng(7);
  for (DType dtype : kDtypes) {
    for (int64_t batch : {1, 2}) {
      const LayerCase c = StemCase(batch, dtype);
      const double error = CheckLayer(Prepare(c, &rng), c.Describe());
      std::printf("direct narrow %-60s N=%lld max relative L2 %.3e\n", c.Describe().c_str(),
                  static_cast<long long>(batch), error);
      if (HasFailure()) return;
    }
  }
}

// A tile's input rows are staged 16 bytes a load where every input row
// starts on a 16-byte boundary (W*C elements a whole number of 16 bytes),
// element by element otherwise (narrow_staging.cuh): the stem at 224
// columns (W*C = 672) the first way, at 221 (663) the second, every
// configuration, at batch 1 (a tile a block) and 5 (560 tiles, more than
// an H100's or H200's blocks of either size fit at once, so some blocks
// take two tiles and stage only the next tile's new rows).
TEST_F(DirectNarrowTest, TheStemStagedBothWaysMatchesTheReference) {
  std::mt19937_64 rng(13);
  for (DType dtype : kDtypes) {
    for (int64_t width : {224, 221}) {
      for (int64_t batch : {1, 5}) {
        LayerCase c = StemCase(batch, dtype);
        c.width = width;
        const double error = CheckLayer(Prepare(c, &rng), c.Describe());
        std::printf("direct narrow %-60s N=%lld staged by %s: max relative L2 %.3e\n",
                    c.Describe().c_str(), static_cast<long long>(batch),
                    width * c.channels * static_cast<int64_t>(DTypeSize(dtype)) % 16 == 0
                        ? "group"
                        : "element",
                    error);
        if (HasFailure()) return;
      }
    }
  }
}

// An infinity in the input reaches only the outputs whose windows hold it;
// the padding elements of a fragment (past S*C) are masked, not multiplied
// by their zero weights. Without an activation the reference gives
// infinities exactly there, so the test compares where each output is
// finite (a ReLU would hide a leaked -infinity as 0).
TEST_F(DirectNarrowTest, AnInfinityStaysInItsWindows) {
  std::mt19937_64 rng(11);
  for (DType dtype : kDtypes) {
    LayerCase c = StemCase(1, dtype);
    c.height = c.width = 40;
    c.activation.kind = ActivationKind::kIdentity;
    PreparedLayer layer = Prepare(c, &rng);
    ASSERT_TRUE(layer.ok);
    // Column 20, channel 2 of row 20: inside some windows, and the element
    // just past the rows of the windows that end at column 19 (S*C = 21
    // elements padded to 24).
    const size_t element = (20 * 40 + 20) * 3 + 2;
    const size_t size = DTypeSize(dtype);
    std::string bits(size, '\0');
    if (dtype == DType::kFloat32) {
      const float inf = INFINITY;
      std::memcpy(bits.data(), &inf, size);
    } else {
      const uint16_t inf = dtype == DType::kFloat16 ? 0x7C00 : 0x7F80;
      std::memcpy(bits.data(), &inf, size);
    }
    ASSERT_EQ(CopyToDevice(static_cast<char*>(layer.x.data()) + element * size, bits.data(), size),
              cudaSuccess);
    std::string input(NumElements(layer.input_shape) * size, '\0');
    ASSERT_EQ(cudaMemcpy(input.data(), layer.x.data(), input.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    Shape output_shape;
    const std::vector<double> expected =
        NaiveForward(*layer.graph, layer.input_shape, input, &output_shape);
    EngineSelection selection;
    ConvLayerPlanner planner(handle_.get(), selection, target_);
    for (const EngineConfigId& id : DirectConvConfigs(layer.problem)) {
      absl::StatusOr<ConvLayerPlan> plan = planner.BuildConfig(layer.problem, id);
      ASSERT_TRUE(plan.ok()) << plan.status();
      absl::StatusOr<DeviceBuffer> y = DeviceBuffer::Create(layer.output_bytes);
      ASSERT_TRUE(y.ok());
      ConvLayerBuffers buffers;
      buffers.x = layer.x.data();
      buffers.w = layer.weights->weights(0);
      buffers.w_narrow = layer.weights->narrow_weights(0);
      buffers.bias = layer.weights->bias(0);
      buffers.y = y->data();
      ASSERT_EQ(plan->Bind(layer.problem, buffers), absl::OkStatus());
      ASSERT_EQ(plan->RunBound(handle_.get(), stream_.get(), layer.problem), absl::OkStatus());
      ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
      std::string actual(layer.output_bytes, '\0');
      ASSERT_EQ(cudaMemcpy(actual.data(), y->data(), actual.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      const std::vector<double> got = DecodeToDouble(dtype, actual);
      size_t non_finite = 0, mismatched = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        non_finite += !std::isfinite(expected[i]);
        mismatched += std::isfinite(expected[i]) != std::isfinite(got[i]);
      }
      EXPECT_GT(non_finite, 0u) << DTypeName(dtype);
      EXPECT_EQ(mismatched, 0u) << DTypeName(dtype) << " " << id.ToString();
    }
  }
}

// Autotune times every narrow configuration on the prober's guarded buffers
// against cuDNN's engines; with direct_kernels off, none is tried.
TEST_F(DirectNarrowTest, AutotuneRacesTheNarrowGemm) {
  std::mt19937_64 rng(13);
  int won = 0, layers = 0;
  for (DType dtype : {DType::kFloat16, DType::kFloat32}) {
    for (int64_t batch : {1, 4}) {
      const LayerCase c = StemCase(batch, dtype);
      const PreparedLayer layer = Prepare(c, &rng);
      ASSERT_TRUE(layer.ok);
      for (bool direct : {true, false}) {
        const DirectRace race = RaceDirect(layer.problem, {kDirectNarrowEngine}, direct);
        EXPECT_EQ(race.tried, direct ? DirectConvConfigs(layer.problem).size() : 0u)
            << c.Describe();
        ASSERT_TRUE(race.best.has_value());
        if (!direct) {
          EXPECT_NE(race.best->path(), LayerPath::kDirect);
          continue;
        }
        ++layers;
        won += race.best->path() == LayerPath::kDirect;
        std::printf(
            "race %s N=%lld %-7s winner %-20s %.4f ms; best narrow %.4f ms, best cuDNN %.4f "
            "ms\n",
            c.name.c_str(), static_cast<long long>(batch), DTypeName(dtype),
            race.best->id().ToString().c_str(), race.best->measured_ms(), race.best_direct,
            race.best_cudnn);
        std::printf("race %s N=%lld %-7s narrow ms:%s\n", c.name.c_str(),
                    static_cast<long long>(batch), DTypeName(dtype), race.times.c_str());
      }
    }
  }
  std::printf("race: the narrow GEMM won %d of %d stem layers\n", won, layers);
}

}  // namespace
}  // namespace convserve
