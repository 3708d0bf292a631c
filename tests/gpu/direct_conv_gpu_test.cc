// The direct path's depthwise kernel (engine/cudnn/direct_conv.h) against the
// float64 reference, layer by layer: seeded random depthwise layers (every
// dtype and layout, odd and even channel counts, odd sizes, strides,
// dilations, asymmetric padding wider than the window, every activation,
// with and without bias) plus the benchmark's MobileNetV2 shapes, each run
// under every direct configuration into an output filled with NaN and
// followed by guard bytes: every element must be written, none past the end.
// Then the engine search: autotune races the direct path and every direct
// candidate passes the prober's guarded-buffer checks; --direct_kernels=false
// keeps it out. Skips without a GPU.
//
// CONVSERVE_DIRECT_SEED and CONVSERVE_DIRECT_CASES change the random cases.
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
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/cudnn/device_weights.h"
#include "engine/cudnn/direct_conv.h"
#include "gtest/gtest.h"
#include "tests/test_util/cudnn_device_test.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/random_tensor.h"

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


struct DepthwiseCase {
  DType dtype = DType::kFloat32;
  bool channels_last = false;
  int64_t batch = 1, channels = 1, height = 1, width = 1;
  int64_t kernel_h = 3, kernel_w = 3;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  bool bias = true;
  Activation activation;

  std::string Describe() const {
    return absl::StrCat(DTypeName(dtype), channels_last ? " NHWC" : " NCHW", " x[", batch, ",",
                        channels, ",", height, ",", width, "] k", kernel_h, "x", kernel_w, " s",
                        stride_h, ",", stride_w, " d", dilation_h, ",", dilation_w, " pad ",
                        pad_top, ",", pad_bottom, ",", pad_left, ",", pad_right,
                        bias ? " bias " : " no bias ", ActivationName(activation.kind));
  }
};

absl::StatusOr<std::shared_ptr<const Graph>> MakeGraph(const DepthwiseCase& c,
                                                       std::mt19937_64* rng) {
  GraphSpec spec;
  spec.name = "depthwise";
  spec.dtype = c.dtype;
  spec.layout = c.channels_last ? Layout::kNHWC : Layout::kNCHW;
  spec.input_channels = c.channels;
  ConvLayerSpec layer;
  layer.out_channels = c.channels;
  layer.groups = c.channels;
  layer.kernel_size = {c.kernel_h, c.kernel_w};
  layer.stride = {c.stride_h, c.stride_w};
  layer.dilation = {c.dilation_h, c.dilation_w};
  layer.pad_before = {c.pad_top, c.pad_left};
  layer.pad_after = {c.pad_bottom, c.pad_right};
  const int64_t taps = c.kernel_h * c.kernel_w;
  layer.weights = RandomTensor(c.dtype, c.channels * taps, std::sqrt(3.0f / taps), rng);
  if (c.bias) layer.bias = RandomTensor(c.dtype, c.channels, 0.5f, rng);
  layer.activation = c.activation;
  spec.layers.push_back(std::move(layer));
  return Graph::Create(std::move(spec));
}

Activation DrawActivation(std::mt19937_64* rng) {
  Activation a;
  a.kind = static_cast<ActivationKind>((*rng)() % (static_cast<int>(ActivationKind::kSwish) + 1));
  if (a.kind == ActivationKind::kRelu) {
    a.has_upper_clip = (*rng)() % 2 == 0;
    a.upper_clip = 6.0f;
    a.negative_slope = (*rng)() % 3 == 0 ? 0.1f : 0.0f;
  }
  if (a.kind == ActivationKind::kElu) a.alpha = 0.7f;
  if (a.kind == ActivationKind::kSoftplus || a.kind == ActivationKind::kSwish) a.beta = 1.5f;
  return a;
}

// A random depthwise layer with at least one output element.
DepthwiseCase DrawCase(std::mt19937_64* rng) {
  const auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>((*rng)() % static_cast<uint64_t>(hi - lo + 1));
  };
  static constexpr int64_t kChannels[] = {1,  2,  3,  4,  5,  6,  7,   8,   12,  15,
                                          16, 24, 31, 32, 40, 64, 96, 144, 257, 520};
  static constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  for (;;) {
    DepthwiseCase c;
    c.dtype = kDtypes[pick(0, 2)];
    c.channels_last = pick(0, 1) == 1;
    c.channels = kChannels[pick(0, std::size(kChannels) - 1)];
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
    if (ConvOutputSize(c.height, c.kernel_h, c.stride_h, c.dilation_h, c.pad_top, c.pad_bottom) >=
            1 &&
        ConvOutputSize(c.width, c.kernel_w, c.stride_w, c.dilation_w, c.pad_left, c.pad_right) >=
            1) {
      return c;
    }
  }
}

// The MobileNetV2 depthwise layers of tests/bench/conv_shapes.csv (batch 2)
// and a 5x5 stride-2 one, each in both layouts and every dtype.
std::vector<DepthwiseCase> BenchmarkCases() {
  std::vector<DepthwiseCase> cases;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (bool channels_last : {false, true}) {
      for (auto [channels, size, kernel, stride] :
           std::vector<std::array<int64_t, 4>>{{144, 56, 3, 1}, {32, 112, 3, 1}, {96, 28, 5, 2}}) {
        DepthwiseCase c;
        c.dtype = dtype;
        c.channels_last = channels_last;
        c.batch = 2;
        c.channels = channels;
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
  double CheckCase(const DepthwiseCase& c, std::mt19937_64* rng) {
    absl::StatusOr<std::shared_ptr<const Graph>> graph = MakeGraph(c, rng);
    EXPECT_TRUE(graph.ok()) << c.Describe() << ": " << graph.status();
    if (!graph.ok()) return INFINITY;
    const Shape input_shape = {c.batch, c.channels, c.height, c.width};
    absl::StatusOr<std::vector<Shape>> outputs = (*graph)->InferShapes(input_shape);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    if (!outputs.ok()) return INFINITY;
    const ConvLayerProblem problem = MakeLayerProblems(**graph, input_shape, *outputs)[0];
    const std::vector<EngineConfigId> configs = DirectConvConfigs(problem);
    EXPECT_EQ(configs.size(), c.channels_last ? 6u : 3u)
        << problem.Describe() << ": " << DirectConvRejection(problem);

    const std::string input = RandomTensor(c.dtype, NumElements(input_shape), 1.0f, rng);
    Shape output_shape;
    const std::vector<double> expected = NaiveForward(**graph, input_shape, input, &output_shape);
    const size_t output_bytes = NumElements(output_shape) * DTypeSize(c.dtype);

    absl::StatusOr<std::unique_ptr<DeviceWeights>> weights = DeviceWeights::Upload(**graph, 0);
    absl::StatusOr<DeviceBuffer> x = DeviceBuffer::Create(input.size());
    EXPECT_TRUE(weights.ok() && x.ok());
    if (!weights.ok() || !x.ok()) return INFINITY;
    EXPECT_EQ(cudaMemcpy(x->data(), input.data(), input.size(), cudaMemcpyHostToDevice),
              cudaSuccess);

    EngineSelection selection;
    ConvLayerPlanner planner(handle_.get(), selection, target_);
    double worst = 0;
    for (const EngineConfigId& id : configs) {
      SCOPED_TRACE(absl::StrCat(c.Describe(), " ", id.ToString()));
      absl::StatusOr<ConvLayerPlan> plan = planner.BuildConfig(problem, id);
      EXPECT_TRUE(plan.ok()) << plan.status();
      if (!plan.ok()) return INFINITY;
      EXPECT_EQ(plan->workspace_bytes(), 0);
      const double error = RunGuarded(*plan, problem, **weights, *x, output_bytes, expected);
      EXPECT_LE(error, Bound(c.dtype));
      worst = std::max(worst, error);
    }
    return worst;
  }

};

TEST_F(DirectConvTest, RandomDepthwiseLayersMatchTheReference) {
  const uint64_t seed = EnvOr("CONVSERVE_DIRECT_SEED", 20261125);
  const uint64_t count = EnvOr("CONVSERVE_DIRECT_CASES", 150);
  std::mt19937_64 rng(seed);
  std::map<DType, double> worst;
  for (uint64_t i = 0; i < count; ++i) {
    const DepthwiseCase c = DrawCase(&rng);
    double& w = worst[c.dtype];
    w = std::max(w, CheckCase(c, &rng));
    if (HasFailure()) {
      ADD_FAILURE() << "seed " << seed << " case " << i << ": " << c.Describe();
      return;
    }
  }
  for (const auto& [dtype, error] : worst) {
    std::printf("direct depthwise, seed %llu, %llu cases: %s max relative L2 %.3e (bound %.0e)\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(count),
                DTypeName(dtype), error, Bound(dtype));
  }
}

TEST_F(DirectConvTest, BenchmarkShapesMatchTheReference) {
  std::mt19937_64 rng(7);
  for (const DepthwiseCase& c : BenchmarkCases()) {
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
  for (const DepthwiseCase& c : BenchmarkCases()) {
    if (c.stride_h != 1) continue;
    absl::StatusOr<std::shared_ptr<const Graph>> graph = MakeGraph(c, &rng);
    ASSERT_TRUE(graph.ok()) << graph.status();
    const Shape input_shape = {c.batch, c.channels, c.height, c.width};
    absl::StatusOr<std::vector<Shape>> outputs = (*graph)->InferShapes(input_shape);
    ASSERT_TRUE(outputs.ok());
    const ConvLayerProblem problem = MakeLayerProblems(**graph, input_shape, *outputs)[0];
    for (bool direct : {true, false}) {
      EngineSelection selection;
      selection.search = EngineSearch::kAutotune;
      selection.direct_kernels = direct;
      ConvLayerPlanner planner(handle_.get(), selection, target_);
      std::optional<ConvLayerPlan> best;
      absl::StatusOr<SearchReport> report =
          SearchEngines(planner, stream_.get(), problem, SearchOptions(), nullptr, &best);
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
  DepthwiseCase c;
  c.channels = 8;
  c.height = c.width = 9;
  absl::StatusOr<std::shared_ptr<const Graph>> graph = MakeGraph(c, &rng);
  ASSERT_TRUE(graph.ok());
  const Shape input_shape = {1, 8, 9, 9};
  absl::StatusOr<std::vector<Shape>> outputs = (*graph)->InferShapes(input_shape);
  ASSERT_TRUE(outputs.ok());
  const ConvLayerProblem problem = MakeLayerProblems(**graph, input_shape, *outputs)[0];
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

}  // namespace
}  // namespace convserve
