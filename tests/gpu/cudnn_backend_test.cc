// The cuDNN backend against the CPU reference backend on fresh random data,
// over dtypes x layouts x activations x groups x geometry x 2-D/3-D x batch x
// channel counts (odd ones force the unfused path), plus multi-layer graphs,
// under four engine-selection policies. Skips where no GPU is present.
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cudnn/cudnn_backend.h"
#include "gtest/gtest.h"
#include "tests/test_util/random_tensor.h"
#include "tests/test_util/naive_conv.h"

namespace convserve {
namespace {

// Relative L2 bounds (acceptance of issue 3). TF32 keeps 10 mantissa bits;
// float16 stores 11 and bfloat16 8 significant bits per element.
constexpr double kStrictFloat32Bound = 1e-5;
constexpr double kTf32Bound = 1e-3;
constexpr double kHalfBound = 1e-2;

struct Policy {
  std::string name;
  EngineSearch search;
  bool deterministic;
  bool strict_float32;
};

const Policy kPolicies[] = {
    {"HeuristicStrict", EngineSearch::kHeuristicInstant, false, true},
    {"HeuristicTf32", EngineSearch::kHeuristicInstant, false, false},
    {"Autotune", EngineSearch::kAutotune, false, false},
    {"Deterministic", EngineSearch::kHeuristicInstant, true, true},
};

struct LayerCase {
  int64_t out_channels;
  std::vector<int64_t> kernel, stride, dilation, pad_before, pad_after;
  int64_t groups;
  bool bias;
  Activation activation;
};

struct GraphCase {
  std::string name;
  DType dtype;
  bool channels_last;
  int rank;
  int64_t batch;
  int64_t channels;
  std::vector<LayerCase> layers;
};

Activation MakeActivation(int index) {
  Activation a;
  switch (index % 10) {
    case 0: a.kind = ActivationKind::kIdentity; break;
    case 1: a.kind = ActivationKind::kRelu; break;
    case 2:
      a.kind = ActivationKind::kRelu;
      a.has_upper_clip = true;
      a.upper_clip = 0.5f;
      a.negative_slope = 0.1f;
      break;
    case 3: a.kind = ActivationKind::kTanh; break;
    case 4: a.kind = ActivationKind::kSigmoid; break;
    case 5: a.kind = ActivationKind::kElu; a.alpha = 0.7f; break;
    case 6: a.kind = ActivationKind::kGelu; break;
    case 7: a.kind = ActivationKind::kGeluTanh; break;
    case 8: a.kind = ActivationKind::kSoftplus; a.beta = 1.5f; break;
    case 9: a.kind = ActivationKind::kSwish; a.beta = 0.8f; break;
  }
  return a;
}

std::string ActivationLabel(const Activation& a) {
  std::string label = ActivationName(a.kind);
  if (a.has_upper_clip) label += "_clip_leaky";
  return label;
}

std::vector<GraphCase> MakeCases() {
  std::vector<GraphCase> cases;
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  const char* geometry_names[] = {"Plain", "Stride2AsymPad", "Dilation2AsymPad"};
  const char* group_names[] = {"G1", "G2", "Depthwise"};
  int index = 0;
  for (DType dtype : dtypes) {
    for (bool channels_last : {false, true}) {
      for (int rank : {2, 3}) {
        for (int groups_kind = 0; groups_kind < 3; ++groups_kind) {
          for (int geometry = 0; geometry < 3; ++geometry, ++index) {
            GraphCase c;
            c.dtype = dtype;
            c.channels_last = channels_last;
            c.rank = rank;
            c.batch = index % 2 == 0 ? 1 : 3;
            // Alternate odd channel counts (unfused path) with aligned ones.
            const bool aligned = index % 3 == 0;
            LayerCase layer;
            if (groups_kind == 0) {
              c.channels = aligned ? 16 : 3 + 2 * (index % 3);
              layer.out_channels = aligned ? 32 : 5 + 2 * (index % 2);
              layer.groups = 1;
            } else if (groups_kind == 1) {
              c.channels = aligned ? 16 : 6;  // 3 per group when odd
              layer.out_channels = aligned ? 32 : 10;
              layer.groups = 2;
            } else {
              c.channels = aligned ? 32 : 3 + 2 * (index % 3);
              layer.out_channels = c.channels * (index % 2 == 0 ? 1 : 2);
              layer.groups = c.channels;
            }
            layer.kernel.assign(rank, 3);
            layer.stride.assign(rank, geometry == 1 ? 2 : 1);
            layer.dilation.assign(rank, geometry == 2 ? 2 : 1);
            layer.pad_before.assign(rank, geometry == 2 ? 2 : 1);
            layer.pad_after.assign(rank, geometry == 0 ? 1 : (geometry == 1 ? 0 : 1));
            layer.bias = index % 4 != 3;
            layer.activation = MakeActivation(index);
            c.layers = {layer};
            c.name = absl::StrCat(DTypeName(dtype), "_", channels_last ? "NHWC" : "NCHW",
                                  rank == 3 ? "3D" : "2D", "_", group_names[groups_kind], "_",
                                  geometry_names[geometry], "_C", c.channels, "K",
                                  layer.out_channels, "_N", c.batch, "_",
                                  ActivationLabel(layer.activation), layer.bias ? "" : "_nobias");
            cases.push_back(c);
          }
        }
      }
    }
  }
  // Multi-layer graphs: intermediates stay on the device.
  for (DType dtype : dtypes) {
    for (bool channels_last : {false, true}) {
      GraphCase c;
      c.dtype = dtype;
      c.channels_last = channels_last;
      c.rank = 2;
      c.batch = 2;
      c.channels = 8;
      const auto conv = [](int64_t k, int64_t size, int64_t stride, int64_t groups, int act) {
        LayerCase l;
        l.out_channels = k;
        l.kernel = {size, size};
        l.stride = {stride, stride};
        l.dilation = {1, 1};
        l.pad_before = {size / 2, size / 2};
        l.pad_after = {size / 2, size / 2};
        l.groups = groups;
        l.bias = true;
        l.activation = MakeActivation(act);
        return l;
      };
      c.layers = {conv(16, 3, 1, 1, 1), conv(16, 3, 1, 16, 9), conv(7, 1, 1, 1, 6),
                  conv(32, 3, 2, 1, 2)};
      c.name = absl::StrCat(DTypeName(dtype), "_", channels_last ? "NHWC" : "NCHW",
                            "_FourLayerStack");
      cases.push_back(c);
    }
  }
  return cases;
}

std::shared_ptr<const Graph> MakeGraph(const GraphCase& c, std::mt19937_64* rng) {
  GraphSpec spec;
  spec.name = "case";
  spec.dtype = c.dtype;
  spec.layout = c.rank == 3 ? (c.channels_last ? Layout::kNDHWC : Layout::kNCDHW)
                            : (c.channels_last ? Layout::kNHWC : Layout::kNCHW);
  spec.input_channels = c.channels;
  int64_t in_channels = c.channels;
  for (const LayerCase& l : c.layers) {
    ConvLayerSpec layer;
    layer.out_channels = l.out_channels;
    layer.kernel_size = l.kernel;
    layer.stride = l.stride;
    layer.dilation = l.dilation;
    layer.pad_before = l.pad_before;
    layer.pad_after = l.pad_after;
    layer.groups = l.groups;
    int64_t fan_in = in_channels / l.groups;
    for (int64_t k : l.kernel) fan_in *= k;
    layer.weights = RandomTensor(c.dtype, l.out_channels * fan_in,
                                std::sqrt(3.0f / static_cast<float>(fan_in)), rng);
    if (l.bias) layer.bias = RandomTensor(c.dtype, l.out_channels, 0.5f, rng);
    layer.activation = l.activation;
    spec.layers.push_back(layer);
    in_channels = l.out_channels;
  }
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(spec);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *graph : nullptr;
}

// Totals printed after the suite: the figures the note reports.
struct Totals {
  int passed = 0;
  int failed = 0;
  int fused_layers = 0;
  int unfused_layers = 0;  // either unfused path
  int direct_layers = 0;
  double max_error = 0;
};
std::map<std::string, Totals>& TotalsByPolicyAndDtype() {
  static auto* totals = new std::map<std::string, Totals>();
  return *totals;
}

class SummaryPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    if (TotalsByPolicyAndDtype().empty()) return;
    std::printf("\n%-18s %-9s %6s %6s %6s %8s %7s %12s\n", "policy", "dtype", "pass", "fail",
                "fused", "unfused", "direct", "max_rel_l2");
    for (const auto& [key, t] : TotalsByPolicyAndDtype()) {
      const size_t split = key.find('/');
      std::printf("%-18s %-9s %6d %6d %6d %8d %7d %12.3e\n", key.substr(0, split).c_str(),
                  key.substr(split + 1).c_str(), t.passed, t.failed, t.fused_layers,
                  t.unfused_layers, t.direct_layers, t.max_error);
    }
  }
};
const auto* const kSummary = ::testing::AddGlobalTestEnvironment(new SummaryPrinter);

class CudnnBackendTest : public ::testing::TestWithParam<std::tuple<Policy, GraphCase>> {
 protected:
  static void SetUpTestSuite() {
    if (CudaDeviceCount() == 0) return;
    cpu_ = CpuBackend::Create({0})->release();
  }

  // One backend per policy, kept for the whole suite (plans are cached).
  static CudnnBackend* BackendFor(const Policy& policy, std::string* skip_reason) {
    static auto* backends = new std::map<std::string, std::unique_ptr<CudnnBackend>>();
    auto it = backends->find(policy.name);
    if (it != backends->end()) return it->second.get();
    CudnnBackendOptions options;
    options.selection.search = policy.search;
    options.selection.deterministic_only = policy.deterministic;
    options.selection.strict_float32 = policy.strict_float32;
    options.selection.autotune_candidates = 4;
    options.selection.autotune_iterations = 3;
    absl::StatusOr<std::unique_ptr<CudnnBackend>> backend = CudnnBackend::Create(options);
    if (!backend.ok()) {
      *skip_reason = backend.status().ToString();
      return nullptr;
    }
    std::printf("%s\n", (*backend)->Describe().c_str());
    return backends->emplace(policy.name, *std::move(backend)).first->second.get();
  }

  static CpuBackend* cpu_;
};
CpuBackend* CudnnBackendTest::cpu_ = nullptr;

TEST_P(CudnnBackendTest, MatchesCpuReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const auto& [policy, c] = GetParam();
  std::string skip_reason;
  CudnnBackend* gpu = BackendFor(policy, &skip_reason);
  if (gpu == nullptr) GTEST_SKIP() << "cuDNN backend unavailable: " << skip_reason;

  std::mt19937_64 rng(std::hash<std::string>()(c.name) ^ 0x5eed);
  std::shared_ptr<const Graph> graph = MakeGraph(c, &rng);
  ASSERT_NE(graph, nullptr);
  Shape input_shape = {c.batch, c.channels};
  const int64_t sizes[] = {5, 12, 13};
  for (int d = 0; d < c.rank; ++d) input_shape.push_back(sizes[3 - c.rank + d]);
  const std::string input = RandomTensor(c.dtype, NumElements(input_shape), 1.0f, &rng);
  const auto in_span =
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(input.data()), input.size());

  absl::StatusOr<std::shared_ptr<Executable>> reference = cpu_->Compile(graph, input_shape);
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::string expected_bytes(NumElements((*reference)->output_shape()) * DTypeSize(c.dtype), 0);
  ASSERT_TRUE((*reference)
                  ->Run(in_span, absl::MakeSpan(reinterpret_cast<uint8_t*>(expected_bytes.data()),
                                                expected_bytes.size()))
                  .ok());

  absl::StatusOr<std::shared_ptr<Executable>> compiled = gpu->Compile(graph, input_shape);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  // NaN everywhere first, so an element the GPU never writes fails the check.
  std::string actual_bytes(expected_bytes.size(), 0);
  const std::vector<float> nans(NumElements((*compiled)->output_shape()),
                                std::numeric_limits<float>::quiet_NaN());
  FromFloat(c.dtype, nans.data(), actual_bytes.data(), nans.size());
  absl::Status run = (*compiled)->Run(
      in_span, absl::MakeSpan(reinterpret_cast<uint8_t*>(actual_bytes.data()), actual_bytes.size()));
  ASSERT_TRUE(run.ok()) << run;

  const double error = RelativeL2Error(DecodeToDouble(c.dtype, actual_bytes),
                                       DecodeToDouble(c.dtype, expected_bytes));
  const double bound = c.dtype != DType::kFloat32 ? kHalfBound
                       : policy.strict_float32    ? kStrictFloat32Bound
                                                  : kTf32Bound;
  const auto* executable = static_cast<const CudnnExecutable*>(compiled->get());
  Totals& totals = TotalsByPolicyAndDtype()[absl::StrCat(policy.name, "/", DTypeName(c.dtype))];
  std::string paths;
  for (const ConvLayerPlan& plan : executable->plans()) {
    (plan.path() == LayerPath::kFused    ? totals.fused_layers
     : plan.path() == LayerPath::kDirect ? totals.direct_layers
                                         : totals.unfused_layers)++;
    absl::StrAppend(&paths, LayerPathName(plan.path()), "(engine ", plan.engine_index(), ") ");
  }
  totals.max_error = std::max(totals.max_error, error);
  (error <= bound ? totals.passed : totals.failed)++;
  EXPECT_LE(error, bound) << c.name << " paths: " << paths;
  RecordProperty("relative_l2_error", absl::StrFormat("%.3e", error));
  RecordProperty("paths", paths);
}

INSTANTIATE_TEST_SUITE_P(
    Grid, CudnnBackendTest,
    ::testing::Combine(::testing::ValuesIn(kPolicies), ::testing::ValuesIn(MakeCases())),
    [](const ::testing::TestParamInfo<std::tuple<Policy, GraphCase>>& info) {
      return absl::StrCat(std::get<0>(info.param).name, "_", std::get<1>(info.param).name);
    });

}  // namespace
}  // namespace convserve
