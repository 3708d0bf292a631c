// The direct path's halo GEMM (engine 4 of engine/cudnn/direct_conv.h)
// against the float64 reference, layer by layer:
// - seeded random 3x3 layers it runs: float16, bfloat16 and float32 NHWC,
//   32, 64, 128 or 256 input channels, 32-256 outputs
//   (multiples of 32), batch 1-3 at odd sizes 1-37 (rarely a whole number
//   of 4- or 8-row by 16-column tiles), padding 0-2 on each side drawn
//   apart (so asymmetric too, and rows of padding alone), and a quarter of
//   them (not where the taps split) batch 4-8 at 40-56 so that every block
//   loops over several tiles; every activation, with and without bias;
// - ResNet-50's 3x3 64 @ 56, 128 @ 28 and 256 @ 14 at batch 1 and 2, every
//   dtype;
// each under every configuration (4 or 8 rows a tile, 32 or 64 output
// channels a block, as fit in shared memory; over 256 bytes of a pixel's
// channels the taps split across 3 blocks, listed where the tiles are
// few, with one halo buffer where two do not fit), float32 with and
// without the weights' TF32 copy, into an output
// filled with NaN and followed by guard bytes: every element must be
// written, none past the end.
// Then the engine search: autotune races it with the implicit GEMM and
// cuDNN on ResNet-50's three layers at batch 1 and 32, float16 and float32
// (every direct candidate passes the prober's guarded-buffer checks), and
// prints each side's best time. Skips without a GPU.
//
// CONVSERVE_HALO_SEED and CONVSERVE_HALO_CASES change the random layers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/cudnn/direct_conv.h"
#include "engine/tensor.h"
#include "gtest/gtest.h"
#include "tests/test_util/cudnn_device_test.h"

namespace convserve {
namespace {

// Whether the halo GEMM splits `c`'s taps: over 256 bytes of a pixel's
// channels.
bool Split(const LayerCase& c) {
  return c.channels * static_cast<int64_t>(DTypeSize(c.dtype)) > kDirectHaloMaxUnsplitBytes;
}

// A random layer the halo GEMM runs.
LayerCase DrawCase(std::mt19937_64* rng) {
  LayerCase c;
  constexpr DType kDTypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32};
  c.dtype = kDTypes[DrawInRange(rng, 0, 2)];
  c.channels_last = true;
  c.channels = 32 << DrawInRange(rng, 0, 3);
  c.kernel_h = c.kernel_w = 3;
  c.pad_top = DrawInRange(rng, 0, 2);
  c.pad_bottom = DrawInRange(rng, 0, 2);
  c.pad_left = DrawInRange(rng, 0, 2);
  c.pad_right = DrawInRange(rng, 0, 2);
  // (Split taps run on layers of few tiles only.)
  if (DrawInRange(rng, 0, 3) == 0 && !Split(c)) {
    // Over 264 tiles (two blocks on each of 132 SMs) at 4 rows; few
    // outputs, so the float64 reference stays quick.
    c.batch = DrawInRange(rng, 4, 8);
    c.height = DrawInRange(rng, 40, 56);
    c.width = DrawInRange(rng, 40, 56);
    c.out_channels = 32 * DrawInRange(rng, 1, 2);
  } else {
    c.batch = DrawInRange(rng, 1, 3);
    // At least one output row and column.
    c.height = DrawInRange(rng, std::max<int64_t>(1, 3 - c.pad_top - c.pad_bottom), 37);
    c.width = DrawInRange(rng, std::max<int64_t>(1, 3 - c.pad_left - c.pad_right), 37);
    c.out_channels = 32 * DrawInRange(rng, 1, 8);
  }
  c.bias = DrawInRange(rng, 0, 3) != 0;
  c.activation = DrawActivation(rng);
  return c;
}

// ResNet-50's 3x3 64 @ 56, 128 @ 28 and 256 @ 14 (padding 1), with bias
// and ReLU.
std::vector<LayerCase> ResNetCases(int64_t batch, DType dtype) {
  std::vector<LayerCase> cases;
  for (int64_t channels : {64, 128, 256}) {
    LayerCase c;
    c.name = channels == 64    ? "resnet50_56_3x3_64_64"
             : channels == 128 ? "resnet50_28_3x3_128_128"
                               : "resnet50_14_3x3_256_256";
    c.dtype = dtype;
    c.channels_last = true;
    c.batch = batch;
    c.channels = c.out_channels = channels;
    c.height = c.width = 56 * 64 / channels;
    c.kernel_h = c.kernel_w = 3;
    c.pad_top = c.pad_bottom = c.pad_left = c.pad_right = 1;
    c.activation.kind = ActivationKind::kRelu;
    cases.push_back(c);
  }
  return cases;
}

class DirectHaloTest : public CudnnDeviceTest {
 protected:
  // Runs every halo configuration of `c` and checks each output; returns
  // the largest relative L2 error.
  double CheckCase(const LayerCase& c, std::mt19937_64* rng) {
    return RunEngineConfigs(c, rng, kDirectHaloEngine, ConfigCount(c));
  }

  // The configurations `c` should have: 4 or 8 rows by 32 or 64 output
  // channels (those dividing K) where they fit in a block's shared memory
  // (on 128 16-bit channels the 8-row tile of 64 does not); split (256
  // 16-bit channels; 128 and 256 float), with one halo buffer where two do
  // not fit, where a block a tile leaves SMs idle (under 132 blocks).
  static size_t ConfigCount(const LayerCase& c) {
    const int64_t p = c.height + c.pad_top + c.pad_bottom - 2;
    const int64_t q = c.width + c.pad_left + c.pad_right - 2;
    const int64_t split = Split(c) ? 3 : 1;
    size_t count = 0;
    for (int64_t rows : {4, 8}) {
      const int64_t tiles = c.batch * ((p + rows - 1) / rows) * ((q + 15) / 16);
      for (int64_t channels : {32, 64}) {
        count += c.out_channels % channels == 0 &&
                 DirectHaloBuffers(c.channels, rows, channels, split,
                                   static_cast<int64_t>(DTypeSize(c.dtype))) > 0 &&
                 (split == 1 || tiles * (c.out_channels / channels) < 132);
      }
    }
    return count;
  }
};

TEST_F(DirectHaloTest, RandomThreeByThreeLayersMatchTheReference) {
  CheckRandomCases(
      "direct halo", EnvOr("CONVSERVE_HALO_SEED", 20262901), EnvOr("CONVSERVE_HALO_CASES", 60),
      DrawCase, [this](const LayerCase& c, std::mt19937_64* rng) { return CheckCase(c, rng); },
      TensorCoreBound);
}

TEST_F(DirectHaloTest, ResNetLayersMatchTheReference) {
  CheckResNetCases("direct halo", ResNetCases,
                   [this](const LayerCase& c, std::mt19937_64* rng) { return CheckCase(c, rng); },
                   {DType::kFloat16, DType::kBFloat16, DType::kFloat32});
}

// Autotune races every configuration with the implicit GEMM's and cuDNN's
// candidates (each direct one through the prober's guarded-buffer checks).
// The split layers (float16 256 @ 14, float32 128 @ 28 and 256 @ 14) have
// halo configurations at batch 1 only, so their races have none to expect.
TEST_F(DirectHaloTest, AutotuneRacesTheHaloGemm) {
  const std::vector<LayerCase> half = ResNetCases(1, DType::kFloat16);
  const std::vector<LayerCase> single = ResNetCases(1, DType::kFloat32);
  const std::vector<int64_t> engines = {kDirectGemmEngine, kDirectHaloEngine};
  RaceResNetCases({half[0], half[1], single[0]}, engines, {"direct:e4:"});
  RaceResNetCases({half[2], single[1], single[2]}, engines, {});
}

}  // namespace
}  // namespace convserve
