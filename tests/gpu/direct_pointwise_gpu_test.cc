// The direct path's pointwise GEMM (engine 3 of engine/cudnn/direct_conv.h)
// against the float64 reference, layer by layer:
// - seeded random 1x1 layers it runs: float16 and bfloat16 NHWC, 32 or 64
//   input channels, 32-512 outputs, batch 1-3 at odd sizes 1-41 (pixel
//   counts rarely a multiple of the 128-pixel tile), and a quarter of them
//   batch 12-16 at 56-64 so that every block loops over several tiles; every
//   activation, with and without bias;
// - ResNet-50's 64->64 and 64->256 at 56x56, batch 1 and 2, both dtypes;
// each under every configuration (one or two blocks an SM; all K output
// channels a block or, on few tiles, slices of 64 or 128: K = 512 at
// batch 3 loops blocks over several tiles a slice), into an output filled
// with NaN and followed by guard bytes: every element must be written,
// none past the end.
// Then the engine search: autotune races it with the implicit GEMM and
// cuDNN on ResNet-50's two layers at batch 1 and 32 (every direct
// candidate passes the prober's guarded-buffer checks) and prints each
// side's best time. Skips without a GPU.
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
  c.dtype = DrawInRange(rng, 0, 1) == 0 ? DType::kFloat16 : DType::kBFloat16;
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

  // One or two blocks an SM, each with all K output channels a block and,
  // on fewer than 132 tiles of 128 pixels, with each slice of 128 or 64
  // that divides K (direct_conv.h, engine 3).
  static size_t ConfigCount(const LayerCase& c) {
    const int64_t tiles = (c.batch * c.height * c.width + 127) / 128;
    size_t slices = 1;
    for (int64_t slice : {128, 64}) {
      slices += tiles < 132 && slice < c.out_channels && c.out_channels % slice == 0;
    }
    return 2 * slices;
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
  CheckResNetCases("direct pointwise", ResNetCases,
                   [this](const LayerCase& c, std::mt19937_64* rng) { return CheckCase(c, rng); });
}

// Autotune races both configurations with the implicit GEMM's and cuDNN's
// candidates (each direct one through the prober's guarded-buffer checks).
TEST_F(DirectPointwiseTest, AutotuneRacesThePointwiseGemm) {
  RaceResNetCases(ResNetCases(1, DType::kFloat16), {kDirectGemmEngine, kDirectPointwiseEngine},
                  {"direct:e3:k5=1=", "direct:e3:k5=2="});
}

}  // namespace
}  // namespace convserve
