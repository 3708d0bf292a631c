// The direct path's pointwise GEMM (engine 3 of engine/cudnn/direct_conv.h)
// against the float64 reference, layer by layer:
// - seeded random 1x1 layers it runs: float16, bfloat16 and float32 (TF32)
//   NHWC, 32 or 64 input channels, 32-512 outputs, batch 1-3 at odd sizes
//   1-41 (pixel counts rarely a multiple of the 128-pixel tile), and a
//   quarter of them batch 12-16 at 56-64 so that every block loops over
//   several tiles; every activation, with and without bias;
// - ResNet-50's 64->64 and 64->256 at 56x56, batch 1 and 2, all three
//   dtypes;
// each under every configuration (one or two blocks an SM where they fit;
// all K output channels a block or, on few tiles or where all K's float32
// weights do not fit, slices of 64 or 128: K = 512 at batch 3 loops blocks
// over several tiles a slice), into an output filled with NaN and followed
// by guard bytes: every element must be written, none past the end.
// Then the engine search: autotune races it with the implicit GEMM and
// cuDNN on ResNet-50's two layers at batch 1 and 32, float16 and float32
// (every direct candidate passes the prober's guarded-buffer checks) and
// prints each side's best time. Skips without a GPU.
//
// CONVSERVE_POINTWISE_SEED and CONVSERVE_POINTWISE_CASES change the random
// layers.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/cudnn/direct_conv.h"
#include "gtest/gtest.h"
#include "tests/test_util/cudnn_device_test.h"

namespace convserve {
namespace {

// A random layer the pointwise GEMM runs.
LayerCase DrawCase(std::mt19937_64* rng) {
  LayerCase c;
  constexpr DType kDTypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32};
  c.dtype = kDTypes[DrawInRange(rng, 0, 2)];
  c.channels_last = true;
  c.channels = 32 * DrawInRange(rng, 1, 2);
  c.kernel_h = c.kernel_w = 1;
  if (DrawInRange(rng, 0, 3) == 0) {
    // Over 264 tiles (two blocks on each of 132 SMs); few outputs, so the
    // float64 reference stays quick.
    c.batch = DrawInRange(rng, 12, 16);
    c.height = DrawInRange(rng, 56, 64);
    c.width = DrawInRange(rng, 56, 64);
    c.out_channels = 32 * DrawInRange(rng, 1, 4);
  } else {
    c.batch = DrawInRange(rng, 1, 3);
    c.height = DrawInRange(rng, 1, 41);
    c.width = DrawInRange(rng, 1, 41);
    c.out_channels = 32 * DrawInRange(rng, 1, 16);
  }
  c.bias = DrawInRange(rng, 0, 3) != 0;
  c.activation = DrawActivation(rng);
  return c;
}

// ResNet-50's 1x1 layers on 64 channels at 56x56, with bias and ReLU.
std::vector<LayerCase> ResNetCases(int64_t batch, DType dtype) {
  std::vector<LayerCase> cases;
  for (int64_t out : {64, 256}) {
    LayerCase c;
    c.name = out == 64 ? "resnet50_56_1x1_64_64" : "resnet50_56_1x1_64_256";
    c.dtype = dtype;
    c.channels_last = true;
    c.batch = batch;
    c.channels = 64;
    c.out_channels = out;
    c.height = c.width = 56;
    c.kernel_h = c.kernel_w = 1;
    c.activation.kind = ActivationKind::kRelu;
    cases.push_back(c);
  }
  return cases;
}

class DirectPointwiseTest : public CudnnDeviceTest {
 protected:
  // Runs both pointwise configurations of `c` and checks each output;
  // returns the largest relative L2 error.
  double CheckCase(const LayerCase& c, std::mt19937_64* rng) {
    return RunEngineConfigs(c, rng, kDirectPointwiseEngine, ConfigCount(c));
  }

  // One or two blocks an SM where their shared memory fits
  // (DirectPointwiseSharedBytes), each with all K output channels a block
  // and, on fewer than 132 tiles of 128 pixels or where all K's weights do
  // not fit in a block, with each slice of 128 or 64 that divides K
  // (direct_conv.h, engine 3).
  static size_t ConfigCount(const LayerCase& c) {
    const int64_t tiles = (c.batch * c.height * c.width + 127) / 128, k = c.out_channels;
    const auto fits = [&](int64_t channels, int64_t blocks) {
      const int64_t bytes = DirectPointwiseSharedBytes(
          c.channels, channels, static_cast<int64_t>(DTypeSize(c.dtype)));
      return bytes <= kDirectMaxSharedBytes && blocks * (bytes + 1024) <= kDirectSharedBytesPerSm;
    };
    std::vector<int64_t> slices = {k};
    for (int64_t slice : {128, 64}) {
      if (slice < k && k % slice == 0 && (tiles < 132 || !fits(k, 1))) slices.push_back(slice);
    }
    size_t count = 0;
    for (int64_t slice : slices) count += fits(slice, 1) + fits(slice, 2);
    return count;
  }
};

TEST_F(DirectPointwiseTest, RandomOneByOneLayersMatchTheReference) {
  CheckRandomCases(
      "direct pointwise", EnvOr("CONVSERVE_POINTWISE_SEED", 20262501),
      EnvOr("CONVSERVE_POINTWISE_CASES", 60), DrawCase,
      [this](const LayerCase& c, std::mt19937_64* rng) { return CheckCase(c, rng); },
      TensorCoreBound);
}

TEST_F(DirectPointwiseTest, ResNetLayersMatchTheReference) {
  CheckResNetCases(
      "direct pointwise", ResNetCases,
      [this](const LayerCase& c, std::mt19937_64* rng) { return CheckCase(c, rng); },
      {DType::kFloat16, DType::kBFloat16, DType::kFloat32});
}

// Autotune races both configurations with the implicit GEMM's and cuDNN's
// candidates (each direct one through the prober's guarded-buffer checks).
TEST_F(DirectPointwiseTest, AutotuneRacesThePointwiseGemm) {
  const std::vector<int64_t> engines = {kDirectGemmEngine, kDirectPointwiseEngine};
  RaceResNetCases(ResNetCases(1, DType::kFloat16), engines,
                  {"direct:e3:k5=1=", "direct:e3:k5=2="});
  if (HasFailure()) return;
  // float32: 64 -> 256's weights take one block an SM.
  RaceResNetCases(ResNetCases(1, DType::kFloat32), engines, {"direct:e3:k5=1="});
}

}  // namespace
}  // namespace convserve
