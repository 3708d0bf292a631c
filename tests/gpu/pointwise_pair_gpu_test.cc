// The pointwise pair (engine/cudnn/pointwise_pair.h: two 1x1 convs in one
// kernel) against the float64 reference, whose intermediate is rounded to
// the dtype as two layers round it:
// - the kernel alone on seeded random pairs (float16 and bfloat16, 32 and 64
//   outer channels, inner channels 32..512, odd pixel counts from 1 up, every
//   activation, bias on and off), on each grid PointwisePairGrids lists
//   (two output slices too where C2 is 64), into an output filled with NaN
//   and followed by guard bytes: every element written, none past the end;
// - the device pool on seeded random graphs with pairs among other layers,
//   under its default flags (the races decide), with every eligible pair
//   fused (a test hook), and with --fuse_pointwise_pairs=false: the
//   reference's output in host memory and in place in device memory, on
//   first runs and on CUDA-graph replays;
// - a kernel that faults in its race: quarantined alone, and a new process
//   on the same plan store runs the two layers unfused.
// Skips without a GPU.
//
// CONVSERVE_PAIR_SEED and CONVSERVE_PAIR_CASES change the random cases.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/graph_file.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/device_weights.h"
#include "engine/cudnn/pointwise_pair.h"
#include "engine/cudnn/pointwise_pair_kernel.h"
#include "engine/runtime/device_pool.h"
#include "engine/status_macros.h"
#include "gtest/gtest.h"
#include "server/proto_convert.h"
#include "tests/test_util/cudnn_device_test.h"
#include "tests/test_util/device_setup.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/random_tensor.h"

namespace convserve {
namespace {

// Relative L2 against the float64 reference: 16-bit outputs differ by a
// rounding flip of the intermediate or the output on some elements.
double Bound(DType dtype) { return dtype == DType::kFloat16 ? 2e-3 : 1e-2; }

constexpr auto Draw = DrawInRange;

void RandomActivation(std::mt19937_64* rng, v1::Activation* activation) {
  activation->set_kind(static_cast<v1::Activation::Kind>(Draw(rng, 0, 8)));
  if (activation->kind() == v1::Activation::RELU) {
    if (Draw(rng, 0, 2) == 0) activation->set_upper_clip(6.0f);
    if (Draw(rng, 0, 2) == 0) activation->set_negative_slope(0.125f);
  }
}

void AddLayer(v1::GraphDef* graph, int64_t out_channels, int64_t kernel, std::mt19937_64* rng) {
  v1::ConvLayer* layer = graph->add_layers();
  layer->set_out_channels(static_cast<int32_t>(out_channels));
  layer->add_kernel_size(static_cast<int32_t>(kernel));
  layer->add_kernel_size(static_cast<int32_t>(kernel));
  for (int d = 0; d < 2; ++d) {
    layer->add_pad_before(static_cast<int32_t>(kernel / 2));
    layer->add_pad_after(static_cast<int32_t>(kernel / 2));
  }
  RandomActivation(rng, layer->mutable_activation());
}

// Parameters filled from `seed`; each layer keeps its bias with odds 2:1.
absl::StatusOr<std::shared_ptr<const Graph>> Finish(v1::GraphDef def, uint64_t seed,
                                                    std::mt19937_64* rng) {
  RETURN_IF_ERROR(FillParameters(seed, /*with_bias=*/true, &def));
  for (v1::ConvLayer& layer : *def.mutable_layers()) {
    if (Draw(rng, 0, 2) == 0) layer.clear_bias();
  }
  ASSIGN_OR_RETURN(GraphSpec spec, GraphSpecFromProto(&def));
  return Graph::Create(std::move(spec));
}

// A pair case: one graph of the two 1x1 layers, and its input shape.
struct PairCase {
  std::shared_ptr<const Graph> graph;
  Shape input_shape;
  std::string Describe() const {
    const GraphSpec& spec = graph->spec();
    return absl::StrCat(DTypeName(spec.dtype), " x", ShapeToString(input_shape), " 1x1 ",
                        spec.input_channels, "->", spec.layers[0].out_channels, "->",
                        spec.layers[1].out_channels);
  }
};

PairCase DrawPairCase(uint64_t seed, std::mt19937_64* rng) {
  v1::GraphDef def;
  def.set_name(absl::StrCat("pair_", seed));
  def.set_data_type(Draw(rng, 0, 1) == 0 ? v1::FLOAT16 : v1::BFLOAT16);
  def.set_layout(v1::NHWC);
  const int64_t c0 = Draw(rng, 1, 2) * 32, c1 = Draw(rng, 1, 16) * 32, c2 = Draw(rng, 1, 2) * 32;
  def.set_input_channels(static_cast<int32_t>(c0));
  AddLayer(&def, c1, 1, rng);
  AddLayer(&def, c2, 1, rng);
  PairCase c;
  // 1 pixel up to ~14 tiles, mostly not a multiple of the 128-pixel tile.
  c.input_shape = {Draw(rng, 1, 3), c0, Draw(rng, 1, 29), Draw(rng, 1, 23)};
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Finish(std::move(def), seed, rng);
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (graph.ok()) c.graph = *std::move(graph);
  return c;
}

class PointwisePairTest : public CudnnDeviceTest {
 protected:
  // Runs the kernel on `c` into a NaN-filled output with guard bytes after
  // it; returns the relative L2 error against the reference (infinity when
  // a step failed, which fails the test too).
  double CheckKernel(const PairCase& c, std::mt19937_64* rng) {
    const Graph& graph = *c.graph;
    absl::StatusOr<std::vector<Shape>> outputs = graph.InferShapes(c.input_shape);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    if (!outputs.ok()) return INFINITY;
    const std::vector<ConvLayerProblem> problems =
        MakeLayerProblems(graph, c.input_shape, *outputs);
    absl::StatusOr<int64_t> limit = PointwisePairSharedLimit();
    EXPECT_TRUE(limit.ok()) << limit.status();
    if (!limit.ok()) return INFINITY;
    const std::string rejection = PointwisePairRejection(problems[0], problems[1], *limit);
    EXPECT_EQ(rejection, "");
    if (!rejection.empty()) return INFINITY;

    const DType dtype = graph.spec().dtype;
    const std::string input = RandomTensor(dtype, NumElements(c.input_shape), 1.0f, rng);
    Shape output_shape;
    const std::vector<double> expected = NaiveForward(graph, c.input_shape, input, &output_shape);
    const size_t output_bytes = NumElements(output_shape) * DTypeSize(dtype);
    absl::StatusOr<std::unique_ptr<DeviceWeights>> weights =
        DeviceWeights::Upload(graph, 0, /*tf32_copies=*/true);
    absl::StatusOr<DeviceBuffer> x = DeviceBuffer::Create(input.size());
    absl::StatusOr<DeviceBuffer> y = DeviceBuffer::Create(output_bytes + kGuardBytes);
    absl::StatusOr<std::vector<PointwisePairGrid>> grids =
        PointwisePairGrids(problems[0], problems[1]);
    EXPECT_TRUE(weights.ok() && x.ok() && y.ok() && grids.ok());
    if (!weights.ok() || !x.ok() || !y.ok() || !grids.ok()) return INFINITY;
    // Two output slices where C2 is 64: these pairs have 16 tiles at most.
    EXPECT_EQ(grids->size(), problems[1].output[1] == 64 ? 2u : 1u);
    EXPECT_EQ(CopyToDevice(x->data(), input.data(), input.size()), cudaSuccess);
    PointwisePairBuffers buffers;
    buffers.x = x->data();
    buffers.w0 = (*weights)->weights(0);
    buffers.bias0 = (*weights)->bias(0);
    buffers.w1 = (*weights)->weights(1);
    buffers.bias1 = (*weights)->bias(1);
    buffers.y = y->data();
    double worst = 0;
    for (const PointwisePairGrid& grid : *grids) {
      EXPECT_EQ(FillDevice(y->data(), kFill, y->bytes()), cudaSuccess);
      const absl::Status ran =
          LaunchPointwisePair(problems[0], problems[1], buffers, grid, stream_.get());
      EXPECT_TRUE(ran.ok()) << ran << " (" << grid.slices << " slices)";
      worst = std::max(worst, ReadGuarded(*y, output_bytes, dtype, expected, ran.ok()));
    }
    return worst;
  }
};

TEST_F(PointwisePairTest, RandomPairsMatchTheReference) {
  const uint64_t seed = EnvOr("CONVSERVE_PAIR_SEED", 20261127);
  const uint64_t count = EnvOr("CONVSERVE_PAIR_CASES", 80);
  std::mt19937_64 rng(seed);
  double worst[2] = {0, 0};
  for (uint64_t i = 0; i < count; ++i) {
    const PairCase c = DrawPairCase(seed + i, &rng);
    ASSERT_NE(c.graph, nullptr);
    const DType dtype = c.graph->spec().dtype;
    const double error = CheckKernel(c, &rng);
    EXPECT_LE(error, Bound(dtype)) << c.Describe();
    worst[dtype == DType::kFloat16 ? 0 : 1] =
        std::max(worst[dtype == DType::kFloat16 ? 0 : 1], error);
    if (HasFailure()) {
      ADD_FAILURE() << "seed " << seed << " case " << i << ": " << c.Describe();
      return;
    }
  }
  std::printf("pointwise pair kernel, seed %llu, %llu cases: max relative L2 float16 %.3e "
              "(bound %.0e), bfloat16 %.3e (bound %.0e)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(count),
              worst[0], Bound(DType::kFloat16), worst[1], Bound(DType::kBFloat16));
}

// A graph with pairs among other layers: an optional 3x3 layer first, then
// one or two pairs of 1x1 layers (a 3x3 between them), an optional 3x3 last.
PairCase DrawGraphCase(uint64_t seed, std::mt19937_64* rng) {
  v1::GraphDef def;
  def.set_name(absl::StrCat("pair_graph_", seed));
  def.set_data_type(Draw(rng, 0, 1) == 0 ? v1::FLOAT16 : v1::BFLOAT16);
  def.set_layout(v1::NHWC);
  const int64_t c0 = Draw(rng, 1, 2) * 32;
  def.set_input_channels(static_cast<int32_t>(c0));
  int64_t channels = c0;
  if (Draw(rng, 0, 1) == 0) AddLayer(&def, channels, 3, rng);
  const int64_t pairs = Draw(rng, 1, 2);
  for (int64_t p = 0; p < pairs; ++p) {
    if (p > 0) AddLayer(&def, channels, 3, rng);
    AddLayer(&def, Draw(rng, 1, 8) * 32, 1, rng);
    channels = Draw(rng, 1, 2) * 32;
    AddLayer(&def, channels, 1, rng);
  }
  if (Draw(rng, 0, 1) == 0) AddLayer(&def, Draw(rng, 1, 48), 3, rng);
  PairCase c;
  c.input_shape = {Draw(rng, 1, 4), c0, Draw(rng, 3, 33), Draw(rng, 3, 27)};
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Finish(std::move(def), seed, rng);
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (graph.ok()) c.graph = *std::move(graph);
  return c;
}

enum class Fusion { kRaced, kAlways, kOff };

// `store`: the plan store directory (empty: a private one); `fault`: the
// race's fault hook.
std::unique_ptr<DevicePool> MakePool(Fusion fusion, const std::string& store = "",
                                     bool fault = false) {
  DevicePoolOptions options;  // the server's defaults but for these
  options.devices = {0};
  options.fuse_pointwise_pairs = fusion != Fusion::kOff;
  options.testing_always_fuse_pairs = fusion == Fusion::kAlways;
  options.testing_fault_in_pair_race = fault;
  options.plan_cache_dir = store;
  // Engine searches in this process (no prober binary next to the test).
  options.prober_binary = "";
  absl::StatusOr<std::unique_ptr<DevicePool>> pool = DevicePool::Create(options);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *std::move(pool) : nullptr;
}

struct Answer {
  absl::Status status;
  Shape shape;
  std::string output;
};

// One request, waited for: host memory, or, with `in` and `out`, device
// memory of GPU 0 read and written in place.
Answer Infer(DevicePool& pool, const PairCase& c, const std::string& input, void* in = nullptr,
             void* out = nullptr) {
  Answer answer;
  absl::StatusOr<std::vector<Shape>> outputs = c.graph->InferShapes(c.input_shape);
  if (!outputs.ok()) {
    answer.status = outputs.status();
    return answer;
  }
  InferCall call;
  call.graph = c.graph;
  call.input_shape = c.input_shape;
  call.layer_outputs = *outputs;
  if (in != nullptr) {
    TensorMemory memory;
    memory.kind = TensorMemory::Kind::kDevice;
    memory.device = 0;
    memory.data = static_cast<uint8_t*>(in);
    memory.bytes = input.size();
    call.input = absl::Span<const uint8_t>(memory.data, memory.bytes);
    call.input_memory = memory;
    memory.data = static_cast<uint8_t*>(out);
    memory.bytes = NumElements(outputs->back()) * DTypeSize(c.graph->spec().dtype);
    call.output_memory = memory;
  } else {
    call.input =
        absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    call.output = &answer.output;
  }
  absl::Notification done;
  call.done = [&](const absl::Status& status, const Shape& shape, const InferTimings&) {
    answer.status = status;
    answer.shape = shape;
    done.Notify();
  };
  pool.Submit(std::move(call));
  done.WaitForNotification();
  return answer;
}

// The pairs of `c`'s layers the pool races, as text (each layer pair's
// problems), taken as FusePairs takes them when every race is won.
std::vector<std::string> EligiblePairs(const PairCase& c, int64_t shared_limit) {
  absl::StatusOr<std::vector<Shape>> outputs = c.graph->InferShapes(c.input_shape);
  EXPECT_TRUE(outputs.ok());
  if (!outputs.ok()) return {};
  const std::vector<ConvLayerProblem> problems =
      MakeLayerProblems(*c.graph, c.input_shape, *outputs);
  std::vector<std::string> pairs;
  for (size_t i = 0; i + 1 < problems.size(); ++i) {
    if (PointwisePairRejection(problems[i], problems[i + 1], shared_limit).empty()) {
      pairs.push_back(absl::StrCat(problems[i].Encode(), "+", problems[i + 1].Encode()));
      ++i;
    }
  }
  return pairs;
}

// Requests through `pool` for each case, each output against the reference:
// host memory three times (a first run, a capture, a replay), then in place
// in device memory twice. Returns the largest relative L2 error.
double RunCases(DevicePool& pool, const std::vector<PairCase>& cases, uint64_t seed) {
  std::mt19937_64 rng(seed);
  double worst = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const PairCase& c = cases[i];
    SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", i, ": ", c.graph->spec().layers.size(),
                              " layers, ", c.Describe()));
    const DType dtype = c.graph->spec().dtype;
    EXPECT_TRUE(pool.AddGraph(c.graph).ok());
    const std::string input = RandomTensor(dtype, NumElements(c.input_shape), 1.0f, &rng);
    Shape output_shape;
    const std::vector<double> expected =
        NaiveForward(*c.graph, c.input_shape, input, &output_shape);
    const size_t output_bytes = NumElements(output_shape) * DTypeSize(dtype);
    std::vector<Answer> answers;
    for (int r = 0; r < 3; ++r) answers.push_back(Infer(pool, c, input));
    absl::StatusOr<DeviceBuffer> in = DeviceBuffer::Create(input.size());
    absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Create(output_bytes);
    EXPECT_TRUE(in.ok() && out.ok());
    if (!in.ok() || !out.ok()) return INFINITY;
    EXPECT_EQ(CopyToDevice(in->data(), input.data(), input.size()), cudaSuccess);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(FillDevice(out->data(), 0xFF, output_bytes), cudaSuccess);  // NaN
      Answer answer = Infer(pool, c, input, in->data(), out->data());
      answer.output.resize(output_bytes);
      EXPECT_EQ(cudaMemcpy(answer.output.data(), out->data(), output_bytes,
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      answers.push_back(std::move(answer));
    }
    for (size_t a = 0; a < answers.size(); ++a) {
      EXPECT_TRUE(answers[a].status.ok()) << "request " << a << ": " << answers[a].status;
      EXPECT_EQ(answers[a].shape, output_shape);
      const double error = RelativeL2Error(DecodeToDouble(dtype, answers[a].output), expected);
      EXPECT_LE(error, Bound(dtype)) << "request " << a;
      worst = std::max(worst, error);
    }
    pool.RemoveGraph(c.graph->id());
    if (::testing::Test::HasFailure()) return worst;
  }
  return worst;
}

class PoolPairTest : public PointwisePairTest, public ::testing::WithParamInterface<Fusion> {};

// Under the default flags the races decide; with the test hook every
// eligible pair runs fused; with fusion off none is raced. Each gives the
// reference's output.
TEST_P(PoolPairTest, RandomGraphsWithPairsMatchTheReference) {
  const Fusion fusion = GetParam();
  const uint64_t seed = EnvOr("CONVSERVE_PAIR_SEED", 20261127) + 1000;
  const uint64_t count = std::max<uint64_t>(EnvOr("CONVSERVE_PAIR_CASES", 80) / 8, 1);
  absl::StatusOr<int64_t> limit = PointwisePairSharedLimit();
  ASSERT_TRUE(limit.ok()) << limit.status();
  std::mt19937_64 rng(seed);
  std::vector<PairCase> cases;
  std::set<std::string> pairs;
  for (uint64_t i = 0; i < count; ++i) {
    cases.push_back(DrawGraphCase(seed + i, &rng));
    ASSERT_NE(cases.back().graph, nullptr);
    for (std::string& pair : EligiblePairs(cases.back(), *limit)) pairs.insert(std::move(pair));
  }
  std::unique_ptr<DevicePool> pool = MakePool(fusion);
  ASSERT_NE(pool, nullptr);
  const double worst = RunCases(*pool, cases, seed);
  const EngineSearchStats stats = pool->Stats().engine_search;
  std::printf("pool (%s), seed %llu, %llu graphs: %zu distinct pairs, %lld raced, %lld fused; "
              "max relative L2 %.3e\n",
              fusion == Fusion::kRaced ? "raced" : fusion == Fusion::kAlways ? "always" : "off",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(count),
              pairs.size(), static_cast<long long>(stats.pair_races),
              static_cast<long long>(stats.pairs_fused), worst);
  switch (fusion) {
    case Fusion::kAlways:
      EXPECT_EQ(stats.pair_races, static_cast<int64_t>(pairs.size()));
      EXPECT_EQ(stats.pairs_fused, stats.pair_races);
      break;
    case Fusion::kRaced:
      EXPECT_GE(stats.pair_races, 1);
      EXPECT_LE(stats.pairs_fused, stats.pair_races);
      break;
    case Fusion::kOff:
      EXPECT_EQ(stats.pair_races, 0);
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(Fusion, PoolPairTest,
                         ::testing::Values(Fusion::kRaced, Fusion::kAlways, Fusion::kOff),
                         [](const ::testing::TestParamInfo<Fusion>& info) {
                           return info.param == Fusion::kRaced   ? std::string("Raced")
                                  : info.param == Fusion::kAlways ? std::string("Always")
                                                                  : std::string("Off");
                         });

// ResNet-50's pair, 64->256->64, float16, ReLU and bias, at N=2, 14x14.
PairCase ResNetPair() {
  std::mt19937_64 rng(3);
  v1::GraphDef def;
  def.set_name("resnet_pair");
  def.set_data_type(v1::FLOAT16);
  def.set_layout(v1::NHWC);
  def.set_input_channels(64);
  AddLayer(&def, 256, 1, &rng);
  AddLayer(&def, 64, 1, &rng);
  for (v1::ConvLayer& layer : *def.mutable_layers()) {
    layer.mutable_activation()->Clear();
    layer.mutable_activation()->set_kind(v1::Activation::RELU);
  }
  PairCase c;
  c.input_shape = {2, 64, 14, 14};
  EXPECT_TRUE(FillParameters(3, /*with_bias=*/true, &def).ok());
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&def);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(*std::move(spec));
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (graph.ok()) c.graph = *std::move(graph);
  return c;
}

// In a child process (EXPECT_EXIT): the first request of `c` on a pool
// whose pair race faults (the test hook) on plan store `store`. Exits 0
// when the request failed UNAVAILABLE, as a lost GPU's requests do; the
// pool is not destroyed (its GPU is lost).
void RequestWithAFaultInTheRace(const PairCase& c, const std::string& store) {
  std::unique_ptr<DevicePool> pool = MakePool(Fusion::kRaced, store, /*fault=*/true);
  if (pool == nullptr || !pool->AddGraph(c.graph).ok()) std::_Exit(2);
  std::mt19937_64 rng(5);
  const std::string input = RandomTensor(DType::kFloat16, NumElements(c.input_shape), 1.0f, &rng);
  const Answer answer = Infer(*pool, c, input);
  std::fprintf(stderr, "request: %s\n", answer.status.ToString().c_str());
  std::fflush(stderr);
  pool.release();
  std::_Exit(absl::IsUnavailable(answer.status) ? 0 : 1);
}

// A fault of the kernel in its race loses that process's GPU and
// quarantines the pair, and only the pair: a new process on the same plan
// store runs the two layers on their own (no race), with their engines (none
// quarantined), and gives the reference's output.
TEST_F(PointwisePairTest, AKernelThatFaultsInItsRaceIsQuarantinedAlone) {
  // A fixed path: the threadsafe death test's child runs this body again up
  // to EXPECT_EXIT, and must find the same directory.
  const std::string store = ::testing::TempDir() + "convserve_pair_fault_store";
  std::filesystem::remove_all(store);
  const PairCase c = ResNetPair();
  ASSERT_NE(c.graph, nullptr);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(RequestWithAFaultInTheRace(c, store), ::testing::ExitedWithCode(0),
              "request: UNAVAILABLE");
  // One verdict: the pair's (the layers' engines ran before it, unharmed).
  int verdicts = 0;
  for (const auto& entry : std::filesystem::directory_iterator(store + "/quarantine")) {
    verdicts += entry.path().extension() == ".rec";
  }
  EXPECT_EQ(verdicts, 1);

  std::unique_ptr<DevicePool> pool = MakePool(Fusion::kRaced, store);
  ASSERT_NE(pool, nullptr);
  ASSERT_TRUE(pool->AddGraph(c.graph).ok());
  std::mt19937_64 rng(9);
  const std::string input = RandomTensor(DType::kFloat16, NumElements(c.input_shape), 1.0f, &rng);
  Shape output_shape;
  const std::vector<double> expected = NaiveForward(*c.graph, c.input_shape, input, &output_shape);
  for (int r = 0; r < 3; ++r) {
    const Answer answer = Infer(*pool, c, input);
    ASSERT_TRUE(answer.status.ok()) << answer.status;
    EXPECT_LE(RelativeL2Error(DecodeToDouble(DType::kFloat16, answer.output), expected),
              Bound(DType::kFloat16));
  }
  const EngineSearchStats stats = pool->Stats().engine_search;
  std::printf("after the fault: %lld pairs raced, %lld fused, %lld engines vetoed, %lld "
              "quarantined, %lld choices from the store\n",
              static_cast<long long>(stats.pair_races), static_cast<long long>(stats.pairs_fused),
              static_cast<long long>(stats.vetoed), static_cast<long long>(stats.quarantined),
              static_cast<long long>(stats.stored_choices));
  EXPECT_EQ(stats.pair_races, 0);
  EXPECT_EQ(stats.pairs_fused, 0);
  EXPECT_EQ(stats.vetoed, 0);
  EXPECT_EQ(stats.quarantined, 0);
  pool.reset();
  std::filesystem::remove_all(store);
}

}  // namespace
}  // namespace convserve
