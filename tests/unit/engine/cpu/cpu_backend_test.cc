#include "engine/cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/types/span.h"
#include "engine/activation.h"
#include "engine/graph.h"
#include "engine/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/random_tensor.h"
#include "tests/test_util/naive_conv.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

// Relative L2 bounds against the double reference. The backend accumulates in
// float and rounds every layer's output to the dtype, so its error is the
// dtype's rounding: float32 sees only summation-order differences (~1e-7);
// float16 keeps an 11-bit significand (half-ulp 2^-11 ~ 4.9e-4) and bfloat16
// 8 bits (2^-8 ~ 3.9e-3), compounded by rounded intermediates in multi-layer
// graphs. The bounds sit 10-40x above the measured figures (printed at the
// end), leaving room for GPU backends' other summation orders, yet far below
// the order-1 error of any indexing or formula mistake.
constexpr double kFloat32Bound = 1e-5;
constexpr double kFloat16Bound = 1e-2;
constexpr double kBFloat16Bound = 2e-2;

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// Seeds derive from this plus the case index, so every case has its own data
// and a failure replays exactly.
constexpr uint64_t kBaseSeed = 0x636f6e7673657276;  // "convserv"

double BoundFor(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return kFloat32Bound;
    case DType::kFloat16:
      return kFloat16Bound;
    case DType::kBFloat16:
      return kBFloat16Bound;
  }
  return 0.0;
}

// Largest error seen per dtype, printed after all tests so a reader sees the
// figures behind the bounds.
class ErrorSummary : public ::testing::Environment {
 public:
  void Record(DType dtype, double error, const std::string& case_name) {
    Worst& worst = worst_[dtype];
    ++worst.cases;
    if (error >= worst.error) {
      worst.error = error;
      worst.case_name = case_name;
    }
  }

  void TearDown() override {
    for (const auto& [dtype, worst] : worst_) {
      std::printf("[ MAX ERROR ] %-8s relative L2 %.3g over %d cases (bound %.0e), worst: %s\n",
                  DTypeName(dtype), worst.error, worst.cases, BoundFor(dtype),
                  worst.case_name.c_str());
    }
  }

 private:
  struct Worst {
    double error = 0.0;
    int cases = 0;
    std::string case_name;
  };
  // Written by the gtest main thread only.
  std::map<DType, Worst> worst_;
};

ErrorSummary* const kErrorSummary =
    static_cast<ErrorSummary*>(::testing::AddGlobalTestEnvironment(new ErrorSummary));

std::unique_ptr<CpuBackend> MakeBackend(int threads) {
  CpuBackendOptions options;
  options.threads = threads;
  absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create(options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? std::move(*backend) : nullptr;
}

// Fills weights (scaled so pre-activations have unit variance, where the
// activations bend) and biases of `spec` from `rng`; the layer with index
// `bias_free_layer` gets no bias.
void FillParameters(GraphSpec* spec, std::mt19937_64* rng, size_t bias_free_layer = SIZE_MAX) {
  int64_t in_channels = spec->input_channels;
  for (size_t i = 0; i < spec->layers.size(); ++i) {
    ConvLayerSpec& layer = spec->layers[i];
    const int64_t groups = layer.groups == 0 ? 1 : layer.groups;
    int64_t fan_in = in_channels / groups;
    for (int64_t k : layer.kernel_size) fan_in *= k;
    const float scale = 3.0f / std::sqrt(static_cast<float>(fan_in));
    layer.weights = RandomTensor(spec->dtype, layer.out_channels * fan_in, scale, rng);
    layer.bias.clear();
    if (i != bias_free_layer) {
      layer.bias = RandomTensor(spec->dtype, layer.out_channels, 0.5f, rng);
    }
    in_channels = layer.out_channels;
  }
}

absl::Span<const uint8_t> AsBytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}
absl::Span<uint8_t> AsMutableBytes(std::string& s) {
  return absl::MakeSpan(reinterpret_cast<uint8_t*>(s.data()), s.size());
}

// Random parameters and input for `spec`, one run on the CPU backend into a
// NaN-filled buffer, compared with NaiveForward. Returns the relative error.
double CheckAgainstReference(GraphSpec spec, const Shape& input_shape, uint64_t seed,
                             size_t bias_free_layer = SIZE_MAX) {
  constexpr double kFailed = std::numeric_limits<double>::infinity();
  std::mt19937_64 rng(seed);
  FillParameters(&spec, &rng, bias_free_layer);
  const std::string input = RandomTensor(spec.dtype, NumElements(input_shape), 1.0f, &rng);
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(spec);
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (!graph.ok()) return kFailed;
  std::unique_ptr<CpuBackend> backend = MakeBackend(3);
  if (backend == nullptr) return kFailed;
  absl::StatusOr<std::shared_ptr<Executable>> executable = backend->Compile(*graph, input_shape);
  EXPECT_TRUE(executable.ok()) << executable.status();
  if (!executable.ok()) return kFailed;

  Shape expected_shape;
  const std::vector<double> expected = NaiveForward(**graph, input_shape, input, &expected_shape);
  EXPECT_EQ((*executable)->output_shape(), expected_shape);
  double energy = 0.0;
  for (double v : expected) energy += v * v;
  EXPECT_GT(energy, 0.0) << "reference output is all zeros; the comparison would be vacuous";

  // 0xff bytes are NaN in all three dtypes, so an element left unwritten fails.
  std::string output(NumElements(expected_shape) * DTypeSize(spec.dtype), '\xff');
  const absl::Status status = (*executable)->Run(AsBytes(input), AsMutableBytes(output));
  EXPECT_TRUE(status.ok()) << status;
  return RelativeL2Error(DecodeToDouble(spec.dtype, output), expected);
}

// The activations of the grid; relu appears plain and as leaky + clipped.
struct NamedActivation {
  const char* name;
  Activation activation;
};

std::vector<NamedActivation> GridActivations() {
  const auto make = [](ActivationKind kind) {
    Activation a;
    a.kind = kind;
    return a;
  };
  Activation leaky_clip = make(ActivationKind::kRelu);
  leaky_clip.negative_slope = 0.1f;
  leaky_clip.has_upper_clip = true;
  leaky_clip.upper_clip = 0.8f;
  Activation elu = make(ActivationKind::kElu);
  elu.alpha = 0.7f;
  Activation softplus = make(ActivationKind::kSoftplus);
  softplus.beta = 1.5f;
  Activation swish = make(ActivationKind::kSwish);
  swish.beta = 0.8f;
  return {{"identity", make(ActivationKind::kIdentity)},
          {"relu", make(ActivationKind::kRelu)},
          {"leakyReluClip", leaky_clip},
          {"tanh", make(ActivationKind::kTanh)},
          {"sigmoid", make(ActivationKind::kSigmoid)},
          {"elu", elu},
          {"gelu", make(ActivationKind::kGelu)},
          {"geluTanh", make(ActivationKind::kGeluTanh)},
          {"softplus", softplus},
          {"swish", swish}};
}

Activation GridActivation(const std::string& name) {
  for (const NamedActivation& a : GridActivations()) {
    if (name == a.name) return a.activation;
  }
  ADD_FAILURE() << "no grid activation named " << name;
  return Activation();
}

enum class GeometryKind { kPlain, kStride2AsymmetricPad, kDilation2AsymmetricPad };

const char* GeometryName(GeometryKind kind) {
  switch (kind) {
    case GeometryKind::kPlain:
      return "plain3x3pad1";
    case GeometryKind::kStride2AsymmetricPad:
      return "stride2AsymPad";
    case GeometryKind::kDilation2AsymmetricPad:
      return "dilation2AsymPad";
  }
  return "unknown";
}

// Sets kernel, stride, dilation and padding of `layer`. Kernels are not
// square in the strided case so a swapped spatial dim cannot go unnoticed.
void SetGeometry(GeometryKind kind, int rank, ConvLayerSpec* layer) {
  const auto pick = [rank](std::vector<int64_t> two_d, std::vector<int64_t> three_d) {
    return rank == 2 ? two_d : three_d;
  };
  switch (kind) {
    case GeometryKind::kPlain:
      layer->kernel_size.assign(rank, 3);
      layer->pad_before.assign(rank, 1);
      layer->pad_after.assign(rank, 1);
      return;
    case GeometryKind::kStride2AsymmetricPad:
      layer->kernel_size = pick({3, 2}, {2, 3, 2});
      layer->stride.assign(rank, 2);
      layer->pad_before = pick({1, 0}, {1, 1, 0});
      layer->pad_after = pick({0, 2}, {0, 0, 2});
      return;
    case GeometryKind::kDilation2AsymmetricPad:
      layer->kernel_size = pick({3, 3}, {2, 3, 3});
      layer->dilation.assign(rank, 2);
      layer->pad_before = pick({2, 0}, {1, 2, 0});
      layer->pad_after = pick({1, 3}, {0, 1, 2});
      return;
  }
}

struct ReferenceCase {
  std::string name;
  // Weights and biases empty; filled from `seed`.
  GraphSpec spec;
  Shape input_shape;
  uint64_t seed = 0;
  // Index of the layer left without a bias; SIZE_MAX for none.
  size_t bias_free_layer = SIZE_MAX;
};

// The full product dtype x layout (NCHW, NHWC, NCDHW, NDHWC) x groups (1, 2,
// depthwise) x geometry x activation x batch (1, 3): 2160 cases, a few
// seconds in all. Channel counts rotate through odd values (odd per group for
// groups = 2) and depthwise through K = C and K = 2C, so every count meets
// every geometry.
std::vector<ReferenceCase> SingleLayerCases() {
  enum class Groups { kOne, kTwo, kDepthwise };
  const std::vector<NamedActivation> activations = GridActivations();
  std::vector<ReferenceCase> cases;
  for (DType dtype : kDTypes) {
    for (Layout layout : {Layout::kNCHW, Layout::kNHWC, Layout::kNCDHW, Layout::kNDHWC}) {
      const int rank = SpatialRank(layout);
      for (Groups groups : {Groups::kOne, Groups::kTwo, Groups::kDepthwise}) {
        for (GeometryKind geometry : {GeometryKind::kPlain, GeometryKind::kStride2AsymmetricPad,
                                      GeometryKind::kDilation2AsymmetricPad}) {
          for (size_t a = 0; a < activations.size(); ++a) {
            for (int64_t batch : {1, 3}) {
              const int64_t odd = 3 + 2 * (a % 3);  // 3, 5, 7
              const bool multiplier2 = (a / 3) % 2 == 1;
              ReferenceCase c;
              c.spec.name = "grid";
              c.spec.dtype = dtype;
              c.spec.layout = layout;
              ConvLayerSpec layer;
              std::string groups_name;
              switch (groups) {
                case Groups::kOne:
                  c.spec.input_channels = odd;
                  layer.out_channels = odd == 5 ? 7 : 5;
                  groups_name = "groups1";
                  break;
                case Groups::kTwo:  // odd channel counts per group
                  c.spec.input_channels = 2 * odd;
                  layer.out_channels = odd == 3 ? 10 : 6;
                  layer.groups = 2;
                  groups_name = "groups2";
                  break;
                case Groups::kDepthwise:
                  c.spec.input_channels = odd;
                  layer.out_channels = multiplier2 ? 2 * odd : odd;
                  layer.groups = odd;
                  groups_name = "depthwise";
                  break;
              }
              SetGeometry(geometry, rank, &layer);
              layer.activation = activations[a].activation;
              c.spec.layers.push_back(layer);
              c.input_shape = {batch, c.spec.input_channels};
              for (int64_t s : rank == 2 ? Shape{7, 9} : Shape{3, 5, 6}) {
                c.input_shape.push_back(s);
              }
              c.name =
                  absl::StrCat(DTypeName(dtype), "_", LayoutName(layout), "_", groups_name, "_C",
                               c.spec.input_channels, "K", layer.out_channels, "_",
                               GeometryName(geometry), "_", activations[a].name, "_batch", batch);
              c.seed = kBaseSeed + cases.size();
              cases.push_back(std::move(c));
            }
          }
        }
      }
    }
  }
  return cases;
}

// Four layers mixing dense, grouped, depthwise and bias-free 1x1 convs with
// strides, dilation and asymmetric padding, per dtype and layout.
std::vector<ReferenceCase> MultiLayerCases() {
  std::vector<ReferenceCase> cases;
  for (int d = 0; d < 3; ++d) {
    for (Layout layout : {Layout::kNCHW, Layout::kNHWC, Layout::kNCDHW, Layout::kNDHWC}) {
      const int rank = SpatialRank(layout);
      const auto pick = [rank](std::vector<int64_t> two_d, std::vector<int64_t> three_d) {
        return rank == 2 ? two_d : three_d;
      };
      ReferenceCase c;
      c.spec.name = "stack";
      c.spec.dtype = kDTypes[d];
      c.spec.layout = layout;
      c.spec.input_channels = 5;
      ConvLayerSpec dense;
      dense.out_channels = 10;
      SetGeometry(GeometryKind::kPlain, rank, &dense);
      dense.activation = GridActivation("leakyReluClip");
      ConvLayerSpec grouped;
      grouped.out_channels = 6;
      grouped.groups = 2;
      grouped.kernel_size = pick({3, 2}, {2, 3, 2});
      grouped.stride.assign(rank, 2);
      grouped.pad_before = pick({1, 0}, {1, 1, 0});
      grouped.pad_after = pick({0, 1}, {0, 0, 1});
      grouped.activation = GridActivation("swish");
      ConvLayerSpec depthwise;
      depthwise.out_channels = 6;
      depthwise.groups = 6;
      depthwise.kernel_size.assign(rank, 3);
      depthwise.dilation.assign(rank, 2);
      depthwise.pad_before = pick({2, 1}, {2, 2, 1});
      depthwise.pad_after = pick({1, 2}, {1, 1, 2});
      depthwise.activation = GridActivation("geluTanh");
      ConvLayerSpec pointwise;
      pointwise.out_channels = 3;
      pointwise.groups = 3;
      pointwise.kernel_size.assign(rank, 1);
      pointwise.activation = GridActivation("softplus");
      c.spec.layers = {dense, grouped, depthwise, pointwise};
      c.bias_free_layer = 3;
      const int64_t batch = (d + rank) % 2 == 0 ? 1 : 3;
      c.input_shape = rank == 2 ? Shape{batch, 5, 9, 11} : Shape{batch, 5, 5, 6, 7};
      c.name = absl::StrCat(DTypeName(c.spec.dtype), "_", LayoutName(layout),
                            "_dense_groups2_depthwise_pointwise_batch", batch);
      c.seed = kBaseSeed + 1000 + cases.size();
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// Keeps gtest from dumping the struct's bytes in test listings.
void PrintTo(const ReferenceCase& c, std::ostream* os) { *os << c.name; }

class CpuBackendReferenceTest : public ::testing::TestWithParam<ReferenceCase> {};

TEST_P(CpuBackendReferenceTest, MatchesNaiveDoubleReference) {
  const ReferenceCase& c = GetParam();
  const double error = CheckAgainstReference(c.spec, c.input_shape, c.seed, c.bias_free_layer);
  RecordProperty("relative_l2_error", absl::StrCat(error));
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  kErrorSummary->Record(c.spec.dtype, error,
                        absl::StrCat(info->test_suite_name(), ".", info->name()));
  EXPECT_LE(error, BoundFor(c.spec.dtype)) << "seed " << c.seed;
}

std::string CaseName(const ::testing::TestParamInfo<ReferenceCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(SingleLayer, CpuBackendReferenceTest,
                         ::testing::ValuesIn(SingleLayerCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(MultiLayer, CpuBackendReferenceTest,
                         ::testing::ValuesIn(MultiLayerCases()), CaseName);

// The float64 reference's activations agree with the engines' (float) ones
// at the edges too: signed zeros, infinities, a NaN where both give one.
TEST(CpuBackendTest, ReferenceActivationsMatchTheEnginesAtTheEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const NamedActivation& a : GridActivations()) {
    for (float x : {-inf, -3.5f, -0.0f, 0.0f, 2.25f, inf}) {
      const double ours = ApplyActivation(a.activation, x);
      const double reference = NaiveActivation(a.activation, x);
      if (std::isnan(ours) || std::isnan(reference)) {
        EXPECT_EQ(std::isnan(ours), std::isnan(reference))
            << a.name << "(" << x << "): " << ours << " vs " << reference;
        continue;
      }
      if (std::isinf(ours) || std::isinf(reference)) {
        EXPECT_EQ(ours, reference) << a.name << "(" << x << ")";
        continue;
      }
      EXPECT_NEAR(ours, reference, 1e-6 * std::max(1.0, std::abs(reference)))
          << a.name << "(" << x << ")";
    }
  }
  // A plain ReLU gives +0 for -0 and -infinity on both sides.
  const Activation relu = GridActivation("relu");
  for (float x : {-inf, -0.0f}) {
    EXPECT_EQ(ApplyActivation(relu, x), 0.0f);
    EXPECT_FALSE(std::signbit(ApplyActivation(relu, x)));
    EXPECT_EQ(NaiveActivation(relu, x), 0.0);
    EXPECT_FALSE(std::signbit(NaiveActivation(relu, x))) << x;
  }
}

TEST(CpuBackendTest, FillsEveryElementOfOneByOneOutputs) {
  uint64_t seed = kBaseSeed + 2000;
  for (int d = 0; d < 3; ++d) {
    for (Layout layout : {Layout::kNCHW, Layout::kNHWC, Layout::kNCDHW, Layout::kNDHWC}) {
      const int rank = SpatialRank(layout);
      // A kernel covering the whole input, a 1x1 input with a 1x1 kernel, and
      // a stride larger than the input.
      for (int64_t extent : {3, 1, 4}) {
        GraphSpec spec;
        spec.name = "one_by_one";
        spec.dtype = kDTypes[d];
        spec.layout = layout;
        spec.input_channels = 3;
        ConvLayerSpec layer;
        layer.out_channels = 5;
        layer.kernel_size.assign(rank, extent == 3 ? 3 : 1);
        layer.stride.assign(rank, extent == 4 ? 5 : 1);
        layer.activation.kind = ActivationKind::kTanh;
        spec.layers.push_back(layer);
        Shape input_shape = {3, 3};
        input_shape.resize(2 + rank, extent);
        SCOPED_TRACE(absl::StrCat(DTypeName(spec.dtype), " ", LayoutName(layout), " input ",
                                  ShapeToString(input_shape)));
        const double error = CheckAgainstReference(spec, input_shape, ++seed);
        EXPECT_LE(error, BoundFor(spec.dtype));
      }
    }
  }
}

// A 2-layer float16 NHWC graph used by the concurrency test.
std::shared_ptr<const Graph> ConcurrencyGraph() {
  GraphSpec spec;
  spec.name = "concurrent";
  spec.dtype = DType::kFloat16;
  spec.layout = Layout::kNHWC;
  spec.input_channels = 6;
  ConvLayerSpec grouped;
  grouped.out_channels = 10;
  grouped.groups = 2;
  SetGeometry(GeometryKind::kPlain, 2, &grouped);
  grouped.activation.kind = ActivationKind::kGelu;
  ConvLayerSpec depthwise;
  depthwise.out_channels = 10;
  depthwise.groups = 10;
  SetGeometry(GeometryKind::kStride2AsymmetricPad, 2, &depthwise);
  spec.layers = {grouped, depthwise};
  std::mt19937_64 rng(kBaseSeed + 3000);
  FillParameters(&spec, &rng);
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(spec);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *graph : nullptr;
}

TEST(CpuBackendTest, ConcurrentRunsOnOneExecutableGiveIdenticalBytes) {
  constexpr int kThreads = 6;
  constexpr int kRunsPerThread = 30;
  std::shared_ptr<const Graph> graph = ConcurrencyGraph();
  ASSERT_NE(graph, nullptr);
  std::unique_ptr<CpuBackend> backend = MakeBackend(4);
  ASSERT_NE(backend, nullptr);
  const Shape input_shape = {2, 6, 40, 44};
  absl::StatusOr<std::shared_ptr<Executable>> compiled = backend->Compile(graph, input_shape);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  Executable& executable = **compiled;
  const size_t output_bytes = NumElements(executable.output_shape()) * 2;

  // A different input per thread, so a run that read or wrote another's
  // buffers would change bytes; the expected bytes come from serial runs.
  std::mt19937_64 rng(kBaseSeed + 3001);
  std::vector<std::string> inputs, expected;
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back(RandomTensor(DType::kFloat16, NumElements(input_shape), 1.0f, &rng));
    expected.emplace_back(output_bytes, '\xff');
    ASSERT_TRUE(executable.Run(AsBytes(inputs[t]), AsMutableBytes(expected[t])).ok());
  }
  ASSERT_NE(expected[0], expected[1]);

  std::atomic<int> failed_runs{0};
  std::atomic<int> mismatches{0};
  auto* barrier = new absl::Barrier(kThreads);  // deleted by the last to pass
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (barrier->Block()) delete barrier;
      for (int r = 0; r < kRunsPerThread; ++r) {
        std::string output(output_bytes, '\xff');
        if (!executable.Run(AsBytes(inputs[t]), AsMutableBytes(output)).ok()) ++failed_runs;
        if (output != expected[t]) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failed_runs.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(CpuBackendTest, RunRejectsBuffersOfTheWrongSize) {
  std::shared_ptr<const Graph> graph = ConcurrencyGraph();
  ASSERT_NE(graph, nullptr);
  std::unique_ptr<CpuBackend> backend = MakeBackend(2);
  ASSERT_NE(backend, nullptr);
  absl::StatusOr<std::shared_ptr<Executable>> executable = backend->Compile(graph, {1, 6, 8, 8});
  ASSERT_TRUE(executable.ok()) << executable.status();
  std::string input(1 * 6 * 8 * 8 * 2, '\0');
  std::string output(NumElements((*executable)->output_shape()) * 2, '\0');
  EXPECT_TRUE((*executable)->Run(AsBytes(input), AsMutableBytes(output)).ok());
  std::string short_input = input.substr(2);
  EXPECT_EQ((*executable)->Run(AsBytes(short_input), AsMutableBytes(output)).code(),
            absl::StatusCode::kInvalidArgument);
  std::string long_output = output + "xx";
  EXPECT_FALSE((*executable)->Run(AsBytes(input), AsMutableBytes(long_output)).ok());
}

// `layers` padded 3x3 float32 NCHW layers of 4 channels, so every layer
// keeps the 1x4x8x8 shape: for the cancellation tests.
std::shared_ptr<const Graph> ChainGraph(int layers) {
  GraphSpec spec;
  spec.name = "chain";
  spec.dtype = DType::kFloat32;
  spec.layout = Layout::kNCHW;
  spec.input_channels = 4;
  for (int i = 0; i < layers; ++i) {
    ConvLayerSpec layer;
    layer.out_channels = 4;
    SetGeometry(GeometryKind::kPlain, 2, &layer);
    layer.activation.kind = ActivationKind::kTanh;
    spec.layers.push_back(layer);
  }
  std::mt19937_64 rng(kBaseSeed + 4000 + layers);
  FillParameters(&spec, &rng);
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(spec);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *graph : nullptr;
}

TEST(CpuBackendTest, CancelCheckThatTurnsTrueAfterLayerKStopsTheRunThere) {
  constexpr int kLayers = 5;
  std::shared_ptr<const Graph> graph = ChainGraph(kLayers);
  ASSERT_NE(graph, nullptr);
  std::unique_ptr<CpuBackend> backend = MakeBackend(2);
  ASSERT_NE(backend, nullptr);
  absl::StatusOr<std::shared_ptr<Executable>> executable = backend->Compile(graph, {1, 4, 8, 8});
  ASSERT_TRUE(executable.ok()) << executable.status();
  std::mt19937_64 rng(kBaseSeed + 4100);
  const std::string input = RandomTensor(DType::kFloat32, 4 * 8 * 8, 1.0f, &rng);
  std::string output(NumElements((*executable)->output_shape()) * sizeof(float), '\0');
  for (int k = 1; k < kLayers; ++k) {
    SCOPED_TRACE(absl::StrCat("the check turns true after layer ", k));
    // Poll p comes after layer p has run and before layer p + 1 would.
    int polls = 0;
    const CancelCheck cancelled = [&polls, k] { return ++polls >= k; };
    const absl::Status status =
        (*executable)->Run(AsBytes(input), AsMutableBytes(output), cancelled);
    EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
    // No poll after the one that said stop, so no layer after layer k either.
    EXPECT_EQ(polls, k);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(absl::StrCat("graph 'chain' stopped after layer ", k, " of ", kLayers,
                                       ": the client cancelled or the deadline passed")));
  }
}

TEST(CpuBackendTest, CancelCheckIsPolledBetweenLayersOnlyAndFalseChangesNothing) {
  for (int layers : {1, 2, 5}) {
    SCOPED_TRACE(absl::StrCat(layers, " layers"));
    std::shared_ptr<const Graph> graph = ChainGraph(layers);
    ASSERT_NE(graph, nullptr);
    std::unique_ptr<CpuBackend> backend = MakeBackend(2);
    ASSERT_NE(backend, nullptr);
    absl::StatusOr<std::shared_ptr<Executable>> executable =
        backend->Compile(graph, {1, 4, 8, 8});
    ASSERT_TRUE(executable.ok()) << executable.status();
    std::mt19937_64 rng(kBaseSeed + 4200 + layers);
    const std::string input = RandomTensor(DType::kFloat32, 4 * 8 * 8, 1.0f, &rng);
    const size_t output_bytes = NumElements((*executable)->output_shape()) * sizeof(float);
    std::string checked(output_bytes, '\xff');
    std::string unchecked(output_bytes, '\xff');
    int polls = 0;
    const CancelCheck never = [&polls] {
      ++polls;
      return false;
    };
    ASSERT_TRUE((*executable)->Run(AsBytes(input), AsMutableBytes(checked), never).ok());
    ASSERT_TRUE((*executable)->Run(AsBytes(input), AsMutableBytes(unchecked)).ok());
    // Not before the first layer: the runner checks before the work starts.
    EXPECT_EQ(polls, layers - 1);
    EXPECT_EQ(checked, unchecked);
  }
}

TEST(CpuBackendTest, CompileRejectsShapesTheGraphCannotTake) {
  std::shared_ptr<const Graph> graph = ConcurrencyGraph();
  ASSERT_NE(graph, nullptr);
  std::unique_ptr<CpuBackend> backend = MakeBackend(1);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->Compile(graph, {1, 5, 8, 8}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->Compile(graph, {1, 6, 8, 8, 8}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 1x1 passes the padded 3x3 layer but is too small for the strided one.
  EXPECT_EQ(backend->Compile(graph, {1, 6, 1, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend->Compile(graph, {1, 6, 2, 1}).ok());
}

TEST(CpuBackendTest, CreateRejectsNegativeThreads) {
  CpuBackendOptions options;
  options.threads = -1;
  EXPECT_EQ(CpuBackend::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.threads = 0;  // one per hardware thread
  absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu");
}

}  // namespace
}  // namespace convserve
