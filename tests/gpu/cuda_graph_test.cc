// Whole-graph CUDA graphs in the GPU device pool: seeded random graphs (odd
// shapes and channel counts included) with --cuda_graphs on and off, every
// output against the float64 reference within the per-dtype relative L2
// bounds of the GPU oracle; repeated requests replayed; CUDA-shared-memory-
// like in-place pointers that change between requests; requests launched
// ahead of the last one's end (--launch_ahead), in place and staged mixed;
// unload and reload; cancellation of a long captured graph; and the capture
// machinery itself (a capture that cannot succeed falls back cleanly,
// update in place).
// Skips without a GPU.
//
// Environment (optional): CONVSERVE_CUDA_GRAPH_GRAPHS random graphs per mode
// (40), CONVSERVE_CUDA_GRAPH_SEED first seed (5000).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "client/graph_file.h"
#include "engine/cudnn/captured_layers.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/runtime/device_pool.h"
#include "engine/status_macros.h"
#include "gtest/gtest.h"
#include "server/proto_convert.h"
#include "tests/test_util/device_setup.h"
#include "tests/test_util/graph_oracle.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/random_graph.h"
#include "tests/test_util/random_tensor.h"

namespace convserve {
namespace {

// The GPU oracle's bounds under the default policy (TF32 allowed).
OracleBounds Bounds() {
  OracleBounds bounds;
  bounds.float32 = 2e-3;
  return bounds;
}

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  int64_t value = 0;
  return text != nullptr && absl::SimpleAtoi(text, &value) ? value : fallback;
}

RandomGraphOptions GpuGraphOptions() {
  RandomGraphOptions options;
  options.max_spatial_2d = 40;
  options.max_spatial_3d = 12;
  options.max_channels = 40;
  options.max_macs = 8'000'000;
  options.aligned_channels_fraction = 0.3;
  options.name_prefix = "cuda_graph";
  return options;
}

std::unique_ptr<DevicePool> MakePool(
    bool cuda_graphs, int max_variants = 4,
    absl::Duration variant_idle = CudaGraphCacheOptions().variant_idle,
    bool launch_ahead = DevicePoolOptions().launch_ahead) {
  DevicePoolOptions options;
  options.launch_ahead = launch_ahead;
  options.devices = {0};
  // One worker: every request of a key lands where the earlier ones ran.
  options.workers_per_device = 1;
  options.selection.search = EngineSearch::kHeuristicInstant;
  options.cuda_graphs = cuda_graphs;
  options.cuda_graph_cache.max_variants = max_variants;
  options.cuda_graph_cache.variant_idle = variant_idle;
  absl::StatusOr<std::unique_ptr<DevicePool>> pool = DevicePool::Create(options);
  if (!pool.ok()) {
    ADD_FAILURE() << pool.status();
    return nullptr;
  }
  return *std::move(pool);
}

absl::StatusOr<std::shared_ptr<const Graph>> MakeGraph(v1::GraphDef def) {
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&def);
  if (!spec.ok()) return spec.status();
  return Graph::Create(*std::move(spec));
}

struct Answer {
  absl::Status status;
  Shape shape;
  InferTimings timings;
  std::string output;
};

// A request of `input` to `graph`, its output into `answer`, with no `done`
// yet. Host memory unless `in` and `out` (device memory of GPU 0, read and
// written in place) are given.
absl::StatusOr<InferCall> MakeCall(const std::shared_ptr<const Graph>& graph,
                                   const Shape& input_shape, const std::string& input, void* in,
                                   void* out, Answer* answer) {
  ASSIGN_OR_RETURN(const std::vector<Shape> outputs, graph->InferShapes(input_shape));
  InferCall call;
  call.graph = graph;
  call.input_shape = input_shape;
  call.layer_outputs = outputs;
  const size_t element = DTypeSize(graph->spec().dtype);
  if (in != nullptr) {
    TensorMemory memory;
    memory.kind = TensorMemory::Kind::kDevice;
    memory.data = static_cast<uint8_t*>(in);
    memory.bytes = input.size();
    memory.device = 0;
    call.input = absl::Span<const uint8_t>(memory.data, memory.bytes);
    call.input_memory = memory;
    memory.data = static_cast<uint8_t*>(out);
    memory.bytes = NumElements(outputs.back()) * element;
    call.output_memory = memory;
  } else {
    call.input =
        absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    call.output = &answer->output;
  }
  return call;
}

// One request through the pool (MakeCall), waited for.
Answer Infer(DevicePool& pool, const std::shared_ptr<const Graph>& graph, const Shape& input_shape,
           const std::string& input, void* in = nullptr, void* out = nullptr,
           std::function<bool()> cancelled = nullptr) {
  Answer answer;
  absl::StatusOr<InferCall> made = MakeCall(graph, input_shape, input, in, out, &answer);
  if (!made.ok()) {
    answer.status = made.status();
    return answer;
  }
  InferCall call = *std::move(made);
  call.cancelled = std::move(cancelled);
  absl::Notification done;
  call.done = [&](const absl::Status& status, const Shape& shape, const InferTimings& timings) {
    answer.status = status;
    answer.shape = shape;
    answer.timings = timings;
    done.Notify();
  };
  pool.Submit(std::move(call));
  done.WaitForNotification();
  return answer;
}

// Sets `call`'s done to record its end in `answer` and count down `done`:
// for requests submitted together and waited for at once.
void AnswerInto(Answer* answer, absl::BlockingCounter* done, InferCall* call) {
  call->done = [answer, done](const absl::Status& status, const Shape& shape,
                              const InferTimings& timings) {
    answer->status = status;
    answer->shape = shape;
    answer->timings = timings;
    done->DecrementCount();
  };
}

// "" or what is wrong with `answer` against `reference`.
std::string Check(const Answer& answer, const OracleReference& reference, DType dtype) {
  if (!answer.status.ok()) return answer.status.ToString();
  if (answer.shape != reference.shape) {
    return absl::StrCat("shape ", ShapeToString(answer.shape), ", reference ",
                        ShapeToString(reference.shape));
  }
  if (answer.output.size() != reference.values.size() * DTypeSize(dtype)) {
    return absl::StrCat("output holds ", answer.output.size(), " bytes");
  }
  const double error = RelativeL2Error(DecodeToDouble(dtype, answer.output), reference.values);
  const double bound = Bounds().For(dtype);
  return error <= bound ? "" : absl::StrCat("relative L2 error ", error, " > ", bound);
}

class CudaGraphOracleTest : public ::testing::TestWithParam<bool> {};

TEST_P(CudaGraphOracleTest, RandomGraphsMatchReferenceAndRepeatsReplay) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const bool cuda_graphs = GetParam();
  const int64_t graphs = EnvInt("CONVSERVE_CUDA_GRAPH_GRAPHS", 40);
  const int64_t seed = EnvInt("CONVSERVE_CUDA_GRAPH_SEED", 5000);
  std::vector<RandomGraphCase> graph_cases;
  for (int64_t i = 0; i < graphs; ++i) {
    graph_cases.push_back(MakeRandomGraph(seed + i, GpuGraphOptions()));
  }
  const OracleCases cases = MakeOracleCases(std::move(graph_cases));
  ComputeReferences(cases, 8);
  std::unique_ptr<DevicePool> pool = MakePool(cuda_graphs);
  ASSERT_NE(pool, nullptr);

  constexpr int kRepeats = 4;
  int64_t replayed_last = 0;
  for (const auto& oracle_case : cases) {
    const RandomGraphCase& c = oracle_case->graph_case();
    const absl::StatusOr<OracleReference>& reference = oracle_case->reference();
    ASSERT_TRUE(reference.ok()) << c.description << ": " << reference.status();
    absl::StatusOr<std::shared_ptr<const Graph>> graph = MakeGraph(c.graph);
    ASSERT_TRUE(graph.ok()) << c.description << ": " << graph.status();
    ASSERT_TRUE(pool->AddGraph(*graph).ok());
    const CudaGraphStats before = pool->cuda_graph_stats();
    for (int r = 0; r < kRepeats; ++r) {
      const Answer answer = Infer(*pool, *graph, c.input_shape, c.input);
      EXPECT_EQ(Check(answer, *reference, oracle_case->dtype()), "")
          << c.description << ", request " << r << (answer.timings.replayed ? " (replayed)" : "");
      // The first run warms up, the second captures; only later ones replay.
      if (r < 2) EXPECT_FALSE(answer.timings.replayed) << c.description << ", request " << r;
      if (!cuda_graphs) EXPECT_FALSE(answer.timings.replayed) << c.description;
      if (r == kRepeats - 1 && answer.timings.replayed) ++replayed_last;
    }
    const CudaGraphStats after = pool->cuda_graph_stats();
    if (cuda_graphs) {
      // Captured once and replayed after, or it fell back for good.
      const int64_t fallbacks = after.fallbacks - before.fallbacks;
      const int64_t captures = after.captures - before.captures;
      EXPECT_EQ(captures + fallbacks, 1) << c.description;
      EXPECT_EQ(after.replays - before.replays, fallbacks == 0 ? kRepeats - 2 : 0)
          << c.description;
    }
    pool->RemoveGraph((*graph)->id());
  }
  const CudaGraphStats stats = pool->cuda_graph_stats();
  std::printf("cuda_graphs=%s: %lld graphs, %lld captures, %lld replays, %lld fallbacks, "
              "%lld invalidations; last request replayed for %lld graphs; %lld cached at the "
              "end\n",
              cuda_graphs ? "on" : "off", static_cast<long long>(graphs),
              static_cast<long long>(stats.captures), static_cast<long long>(stats.replays),
              static_cast<long long>(stats.fallbacks),
              static_cast<long long>(stats.invalidations),
              static_cast<long long>(replayed_last), static_cast<long long>(stats.entries));
  EXPECT_EQ(stats.entries, 0) << "unloaded graphs keep no captures";
  if (cuda_graphs) {
    EXPECT_GT(replayed_last, graphs / 2) << "most graphs should capture";
    EXPECT_EQ(replayed_last + stats.fallbacks, graphs);
  } else {
    EXPECT_EQ(stats.captures + stats.replays + stats.fallbacks, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaGraphOracleTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "GraphsOn" : "GraphsOff";
                         });

// A random case of at least two layers (so in-place input and output are
// different layers' buffers), and a second input for the same graph.
struct TwoInputs {
  std::shared_ptr<const OracleCase> a, b;

  // Input i (0: a's, 1: b's) and its reference.
  const std::string& input(int i) const { return (i == 0 ? a : b)->graph_case().input; }
  const OracleReference& reference(int i) const { return *(i == 0 ? a : b)->reference(); }
  size_t output_bytes() const { return reference(0).values.size() * DTypeSize(a->dtype()); }
};

TwoInputs MakeTwoInputs(uint64_t first_seed) {
  for (uint64_t seed = first_seed;; ++seed) {
    RandomGraphCase a = MakeRandomGraph(seed, GpuGraphOptions());
    if (a.graph.layers_size() < 2) continue;
    // Same graph and weights (already filled), another input.
    absl::StatusOr<RandomGraphCase> b = MakeGraphCase(a.graph, a.input_shape, seed + 7777, false);
    if (!b.ok()) continue;
    OracleCases cases = MakeOracleCases({std::move(a), *std::move(b)});
    ComputeReferences(cases, 2);
    return {cases[0], cases[1]};
  }
}

struct DeviceSlot {
  void* in = nullptr;
  void* out = nullptr;
};

// `count` CUDA-region-like slots in GPU 0's memory, freed with the object:
// slot s holds input s % 2 of `inputs` and room for an output.
class DeviceSlots {
 public:
  DeviceSlots(const TwoInputs& inputs, int count) : slots_(count) {
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    for (int s = 0; s < count; ++s) {
      const std::string& input = inputs.input(s % 2);
      EXPECT_EQ(cudaMalloc(&slots_[s].in, input.size()), cudaSuccess);
      EXPECT_EQ(cudaMalloc(&slots_[s].out, inputs.output_bytes()), cudaSuccess);
      EXPECT_EQ(CopyToDevice(slots_[s].in, input.data(), input.size()), cudaSuccess);
    }
  }
  ~DeviceSlots() {
    for (DeviceSlot& slot : slots_) {
      cudaFree(slot.in);
      cudaFree(slot.out);
    }
  }
  DeviceSlots(const DeviceSlots&) = delete;
  DeviceSlots& operator=(const DeviceSlots&) = delete;

  DeviceSlot& operator[](int s) { return slots_[s]; }
  std::vector<DeviceSlot>::iterator begin() { return slots_.begin(); }
  std::vector<DeviceSlot>::iterator end() { return slots_.end(); }

 private:
  std::vector<DeviceSlot> slots_;
};

// Three CUDA-region-like slots over a bound of two pointer variants, in
// turn. `variant_idle` zero: the third slot's capture updates the oldest
// variant in place (cudaGraphExecUpdate) every time; the default: both
// variants keep running, so the third slot runs plain launches and nothing
// is recaptured. Every answer must be its own slot's.
void CheckInPlacePointersThatChange(absl::Duration variant_idle) {
  const TwoInputs inputs = MakeTwoInputs(EnvInt("CONVSERVE_CUDA_GRAPH_SEED", 5000) + 500);
  ASSERT_TRUE(inputs.a->reference().ok());
  ASSERT_TRUE(inputs.b->reference().ok());
  const RandomGraphCase& a = inputs.a->graph_case();
  const DType dtype = inputs.a->dtype();
  std::printf("in-place case: %s\n", a.description.c_str());
  std::unique_ptr<DevicePool> pool = MakePool(true, /*max_variants=*/2, variant_idle);
  ASSERT_NE(pool, nullptr);
  absl::StatusOr<std::shared_ptr<const Graph>> graph = MakeGraph(a.graph);
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(pool->AddGraph(*graph).ok());
  const size_t out_bytes = inputs.output_bytes();

  // Slots hold inputs a, b, a: a graph replayed with another slot's
  // pointers would give the other input's output (or the 0xFF fill: NaN).
  DeviceSlots slots(inputs, 3);
  ASSERT_FALSE(::testing::Test::HasFailure());
  int replayed = 0;
  for (int round = 0; round < 5; ++round) {
    for (int s = 0; s < 3; ++s) {
      ASSERT_EQ(FillDevice(slots[s].out, 0xFF, out_bytes), cudaSuccess);
      Answer answer = Infer(*pool, *graph, a.input_shape, a.input, slots[s].in, slots[s].out);
      ASSERT_TRUE(answer.status.ok()) << answer.status;
      answer.output.resize(out_bytes);
      ASSERT_EQ(cudaMemcpy(answer.output.data(), slots[s].out, out_bytes, cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_EQ(Check(answer, inputs.reference(s % 2), dtype), "")
          << "round " << round << " slot " << s << (answer.timings.replayed ? " (replayed)" : "");
      replayed += answer.timings.replayed ? 1 : 0;
    }
  }
  const CudaGraphStats stats = pool->cuda_graph_stats();
  std::printf("in-place, variant_idle %s: %d of 15 requests replayed; %lld captures (%lld "
              "updates in place), %lld fallbacks, %lld variant waits\n",
              absl::FormatDuration(variant_idle).c_str(), replayed,
              static_cast<long long>(stats.captures),
              static_cast<long long>(stats.updates), static_cast<long long>(stats.fallbacks),
              static_cast<long long>(stats.variant_waits));
  if (stats.fallbacks == 0) {
    EXPECT_GT(replayed, 0);
    EXPECT_LE(stats.entries, 2);
    if (variant_idle == absl::ZeroDuration()) {
      EXPECT_GT(stats.updates, 0) << "three pointer variants over a bound of two";
    } else {
      // Slots 0 and 1 are captured on their second run and replayed in the
      // three rounds after; slot 2 never takes a variant from them.
      EXPECT_EQ(stats.captures, 2);
      EXPECT_EQ(stats.updates, 0);
      EXPECT_EQ(replayed, 6);
    }
  }
  pool->RemoveGraph((*graph)->id());
}

TEST(CudaGraphTest, InPlacePointersThatChangeBetweenRequestsGiveCorrectResults) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  CheckInPlacePointersThatChange(absl::ZeroDuration());
}

TEST(CudaGraphTest, InPlacePointersInRecentUseAreNotRecapturedAway) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  CheckInPlacePointersThatChange(CudaGraphCacheOptions().variant_idle);
}

// Rounds of 24 requests in CUDA-region-like slots of GPU 0 (inputs a and b
// in turn) and 8 in host memory (staged), all submitted at once to one
// worker: requests wait, and each in-place one is launched behind the one
// before it (--launch_ahead) unless `launch_ahead` is off. Every answer must
// be its own slot's, and every output element written.
void CheckLaunchAhead(bool cuda_graphs, bool launch_ahead, uint64_t seed) {
  const TwoInputs inputs = MakeTwoInputs(seed);
  ASSERT_TRUE(inputs.a->reference().ok());
  ASSERT_TRUE(inputs.b->reference().ok());
  const RandomGraphCase& a = inputs.a->graph_case();
  const DType dtype = inputs.a->dtype();
  std::unique_ptr<DevicePool> pool =
      MakePool(cuda_graphs, 4, CudaGraphCacheOptions().variant_idle, launch_ahead);
  ASSERT_NE(pool, nullptr);
  absl::StatusOr<std::shared_ptr<const Graph>> graph = MakeGraph(a.graph);
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(pool->AddGraph(*graph).ok());
  const size_t out_bytes = inputs.output_bytes();

  constexpr int kDeviceSlots = 24;
  constexpr int kHostSlots = 8;
  constexpr int kRounds = 6;
  DeviceSlots slots(inputs, kDeviceSlots);
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (int round = 0; round < kRounds; ++round) {
    // 0xFF is NaN in every dtype: an element left unwritten fails the check.
    for (DeviceSlot& slot : slots) ASSERT_EQ(FillDevice(slot.out, 0xFF, out_bytes), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // before the workers' own stream reads
    constexpr int kRequests = kDeviceSlots + kHostSlots;
    std::vector<Answer> answers(kRequests);
    std::vector<int> input_of(kRequests);
    absl::BlockingCounter done(kRequests);
    // Host requests every fourth: they are staged, so they are never
    // launched ahead, and those after them follow them. All are made
    // before any is submitted: none may be left running past a failure.
    std::vector<InferCall> calls;
    for (int r = 0, device_slot = 0; r < kRequests; ++r) {
      const bool host = r % 4 == 3;
      DeviceSlot* slot = host ? nullptr : &slots[device_slot++];
      input_of[r] = host ? (r / 4) % 2 : (device_slot - 1) % 2;
      absl::StatusOr<InferCall> call =
          MakeCall(*graph, a.input_shape, inputs.input(input_of[r]), host ? nullptr : slot->in,
                   host ? nullptr : slot->out, &answers[r]);
      ASSERT_TRUE(call.ok()) << call.status();
      AnswerInto(&answers[r], &done, &*call);
      calls.push_back(*std::move(call));
    }
    for (InferCall& call : calls) pool->Submit(std::move(call));
    done.Wait();
    for (int r = 0, device_slot = 0; r < kRequests; ++r) {
      Answer& answer = answers[r];
      if (r % 4 != 3) {
        answer.output.resize(out_bytes);
        ASSERT_EQ(cudaMemcpy(answer.output.data(), slots[device_slot++].out, out_bytes,
                             cudaMemcpyDeviceToHost),
                  cudaSuccess);
      }
      EXPECT_EQ(Check(answer, inputs.reference(input_of[r]), dtype), "")
          << "round " << round << " request " << r << (r % 4 == 3 ? " (host)" : " (in place)");
    }
  }
  int64_t launched_ahead = 0;
  for (const DeviceStats& stats : pool->Stats().devices) launched_ahead += stats.launched_ahead;
  const CudaGraphStats graphs = pool->cuda_graph_stats();
  std::printf(
      "launch_ahead=%d cuda_graphs=%d (%s): %d requests, %lld launched ahead; %lld "
      "replays, %lld captures\n",
      launch_ahead, cuda_graphs, a.description.c_str(), kRounds * (kDeviceSlots + kHostSlots),
      static_cast<long long>(launched_ahead), static_cast<long long>(graphs.replays),
      static_cast<long long>(graphs.captures));
  if (launch_ahead) {
    EXPECT_GT(launched_ahead, 0) << "requests waited, yet none was launched ahead";
  } else {
    EXPECT_EQ(launched_ahead, 0);
  }
  pool->RemoveGraph((*graph)->id());
}

class LaunchAheadTest : public ::testing::TestWithParam<bool> {};

TEST_P(LaunchAheadTest, EveryAnswerIsItsOwnOnSeededRandomGraphs) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const uint64_t first = EnvInt("CONVSERVE_CUDA_GRAPH_SEED", 5000) + 1300;
  for (uint64_t seed = first; seed < first + 3; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    CheckLaunchAhead(/*cuda_graphs=*/GetParam(), /*launch_ahead=*/true, seed * 10);
  }
  CheckLaunchAhead(GetParam(), /*launch_ahead=*/false, first * 10);
}

INSTANTIATE_TEST_SUITE_P(CudaGraphs, LaunchAheadTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "On" : "Off";
                         });

TEST(CudaGraphTest, UnloadAndReloadReplaysWithTheNewWeights) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const TwoInputs inputs = MakeTwoInputs(EnvInt("CONVSERVE_CUDA_GRAPH_SEED", 5000) + 900);
  const RandomGraphCase& original = inputs.a->graph_case();
  // The same graph with other weights (another fingerprint, same name).
  v1::GraphDef changed = original.graph;
  for (v1::ConvLayer& layer : *changed.mutable_layers()) {
    layer.clear_weights();
    layer.clear_bias();
  }
  absl::StatusOr<RandomGraphCase> other =
      MakeGraphCase(changed, original.input_shape, original.seed + 31337, true);
  ASSERT_TRUE(other.ok()) << other.status();
  other->input = original.input;
  const OracleCases other_cases = MakeOracleCases({*std::move(other)});
  ComputeReferences(other_cases, 1);

  std::unique_ptr<DevicePool> pool = MakePool(true);
  ASSERT_NE(pool, nullptr);
  const auto run_three = [&](const OracleCase& oracle_case, const char* phase) {
    absl::StatusOr<std::shared_ptr<const Graph>> graph = MakeGraph(oracle_case.graph_case().graph);
    ASSERT_TRUE(graph.ok()) << graph.status();
    ASSERT_TRUE(pool->AddGraph(*graph).ok());
    const CudaGraphStats before = pool->cuda_graph_stats();
    // The first run warms up, the second captures, the third replays.
    for (int r = 0; r < 2; ++r) {
      const Answer answer = Infer(*pool, *graph, original.input_shape, original.input);
      EXPECT_EQ(Check(answer, *oracle_case.reference(), oracle_case.dtype()), "")
          << phase << " request " << r;
      EXPECT_EQ(answer.timings.replayed, false) << "a (re)loaded graph warms up and captures";
    }
    const Answer replay = Infer(*pool, *graph, original.input_shape, original.input);
    EXPECT_EQ(Check(replay, *oracle_case.reference(), oracle_case.dtype()), "") << phase;
    const CudaGraphStats after = pool->cuda_graph_stats();
    if (after.fallbacks == before.fallbacks) EXPECT_TRUE(replay.timings.replayed) << phase;
    pool->RemoveGraph((*graph)->id());
    EXPECT_EQ(pool->cuda_graph_stats().entries, 0) << phase << ": unload drops the captures";
  };
  run_three(*inputs.a, "first load");
  run_three(*other_cases[0], "other weights");
  run_three(*inputs.a, "reload");
}

// 12 layers of 3x3 128 -> 128 on 1x128x528x528: 41 G MACs each, past the
// pool's 2 ms of assumed work per segment (at 20 G MACs per ms), so every
// layer is its own cancellation segment (and captured graph).
absl::StatusOr<std::shared_ptr<const Graph>> LongGraph() {
  v1::GraphDef graph;
  graph.set_name("long");
  graph.set_data_type(v1::FLOAT16);
  graph.set_layout(v1::NHWC);
  graph.set_input_channels(128);
  for (int i = 0; i < 12; ++i) {
    v1::ConvLayer* layer = graph.add_layers();
    layer->set_out_channels(128);
    for (int d = 0; d < 2; ++d) {
      layer->add_kernel_size(3);
      layer->add_pad_before(1);
      layer->add_pad_after(1);
    }
    layer->mutable_activation()->set_kind(v1::Activation::RELU);
  }
  absl::Status filled = FillParameters(11, true, &graph);
  if (!filled.ok()) return filled;
  return MakeGraph(graph);
}

TEST(CudaGraphTest, CancellingAReplayedLongGraphStopsAtTheNextSegment) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  absl::StatusOr<std::shared_ptr<const Graph>> graph = LongGraph();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Shape shape = {1, 128, 528, 528};
  const std::string input = RandomTensorBytes(v1::FLOAT16, NumElements(shape), 3);
  for (const bool cuda_graphs : {true, false}) {
    SCOPED_TRACE(cuda_graphs ? "cuda_graphs on" : "cuda_graphs off");
    std::unique_ptr<DevicePool> pool = MakePool(cuda_graphs);
    ASSERT_NE(pool, nullptr);
    ASSERT_TRUE(pool->AddGraph(*graph).ok());
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(Infer(*pool, *graph, shape, input).status.ok());
    const CudaGraphStats before = pool->cuda_graph_stats();
    // Polled before the run, after the plans, then at each segment
    // boundary: cancelled from the first boundary on.
    int polls = 0;
    const Answer cancelled =
        Infer(*pool, *graph, shape, input, nullptr, nullptr, [&polls] { return ++polls >= 3; });
    EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled) << cancelled.status;
    EXPECT_NE(cancelled.status.message().find("stopped after layer 1 of 12"), std::string::npos)
        << cancelled.status;
    const CudaGraphStats after = pool->cuda_graph_stats();
    if (cuda_graphs && before.fallbacks == 0) {
      EXPECT_EQ(after.replays - before.replays, 1) << "the cancelled request was a replay";
    }
    // The worker is fine after stopping mid-graph.
    const Answer next = Infer(*pool, *graph, shape, input);
    EXPECT_TRUE(next.status.ok()) << next.status;
    EXPECT_EQ(next.output.size(), input.size());
    pool->RemoveGraph((*graph)->id());
  }
}

TEST(CudaGraphTest, CaptureErrorsAreNotStickyFaults) {
  // No GPU needed: the classification the fault path relies on.
  for (const cudaError_t error :
       {cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureInvalidated,
        cudaErrorStreamCaptureMerge, cudaErrorStreamCaptureUnmatched,
        cudaErrorStreamCaptureUnjoined, cudaErrorStreamCaptureIsolation,
        cudaErrorStreamCaptureImplicit, cudaErrorStreamCaptureWrongThread,
        cudaErrorCapturedEvent, cudaErrorGraphExecUpdateFailure}) {
    EXPECT_FALSE(IsStickyCudaError(error)) << cudaGetErrorName(error);
  }
  EXPECT_TRUE(IsStickyCudaError(cudaErrorIllegalAddress));
  EXPECT_TRUE(IsStickyCudaError(cudaErrorMisalignedAddress));
}

TEST(CapturedLayersTest, UncapturableLaunchFallsBackCleanly) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, 1024), cudaSuccess);
  // A synchronization while capturing is illegal: the capture is
  // invalidated, as by a cuDNN engine that cannot be captured.
  const auto uncapturable = [&](size_t, size_t) -> absl::Status {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(buffer, 1, 1024, stream));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return absl::OkStatus();
  };
  absl::StatusOr<CapturedLayers::Result> result =
      CapturedLayers::Capture(stream, {1}, uncapturable, nullptr);
  ASSERT_TRUE(result.ok()) << "not a sticky fault: " << result.status();
  EXPECT_EQ(result->captured, nullptr);
  EXPECT_FALSE(result->failure.empty());
  std::printf("capture failure: %s\n", result->failure.c_str());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the capture error was cleared";
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusActive;
  ASSERT_EQ(cudaStreamIsCapturing(stream, &capturing), cudaSuccess);
  EXPECT_EQ(capturing, cudaStreamCaptureStatusNone) << "the stream left capture mode";
  // Plain launches work after it.
  EXPECT_EQ(cudaMemsetAsync(buffer, 2, 1024, stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaFree(buffer);
  cudaStreamDestroy(stream);
}

TEST(CapturedLayersTest, SegmentsReplayAndUpdateInPlaceForOtherPointers) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  constexpr size_t kBytes = 4096;
  void* buffers[2] = {nullptr, nullptr};
  for (void*& b : buffers) ASSERT_EQ(cudaMalloc(&b, kBytes), cudaSuccess);
  // Two "layers" per buffer, one segment each: memsets of the buffer's two
  // halves to 7 and 9.
  void* target = buffers[0];
  const auto layers = [&](size_t begin, size_t end) -> absl::Status {
    for (size_t i = begin; i < end; ++i) {
      CUDA_RETURN_IF_ERROR(cudaMemsetAsync(static_cast<char*>(target) + i * kBytes / 2,
                                           i == 0 ? 7 : 9, kBytes / 2, stream));
    }
    return absl::OkStatus();
  };
  const auto replay_and_check = [&](const CapturedLayers& captured, void* buffer) {
    ASSERT_EQ(FillDevice(buffer, 0, kBytes), cudaSuccess);
    for (size_t s = 0; s < captured.segments(); ++s) {
      ASSERT_EQ(captured.Launch(s, stream), cudaSuccess);
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<unsigned char> host(kBytes);
    ASSERT_EQ(cudaMemcpy(host.data(), buffer, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(host.front(), 7);
    EXPECT_EQ(host.back(), 9);
  };
  absl::StatusOr<CapturedLayers::Result> first = CapturedLayers::Capture(stream, {1, 2}, layers,
                                                                         nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_NE(first->captured, nullptr) << first->failure;
  EXPECT_EQ(first->captured->segments(), 2u);
  replay_and_check(*first->captured, buffers[0]);
  replay_and_check(*first->captured, buffers[0]);
  CapturedLayers* kept = first->captured.get();
  target = buffers[1];
  absl::StatusOr<CapturedLayers::Result> second =
      CapturedLayers::Capture(stream, {1, 2}, layers, std::move(first->captured));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_NE(second->captured, nullptr) << second->failure;
  EXPECT_TRUE(second->updated);
  EXPECT_EQ(second->captured.get(), kept);
  replay_and_check(*second->captured, buffers[1]);
  second->captured.reset();
  for (void* b : buffers) cudaFree(b);
  cudaStreamDestroy(stream);
}

// A request of more than one segment (more estimated work than a worker
// queues before it checks for cancellation, 2 ms) waits for its earlier
// segments inside its launch, so one launched behind another would hold back
// the other's answer by that long: none is launched ahead. Six 3x3 512->512
// float16 layers at 64x64 are 58 GMACs, 2.9 ms by the pool's estimate (the
// heuristic policy times nothing): a segment of five layers (the first to
// reach 2 ms) and one of the last. Eight requests of one input, in
// CUDA-region-like slots, submitted at once to one worker: all answered,
// launched one after another, with the same bytes, every element written.
TEST(LaunchAheadTest, RequestsOfSeveralSegmentsAreNotLaunchedAhead) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  constexpr int64_t kChannels = 512, kSize = 64;
  constexpr int kRequests = 8;
  std::mt19937_64 rng(29);
  GraphSpec spec;
  spec.name = "five_segments_of_work";
  spec.dtype = DType::kFloat16;
  spec.layout = Layout::kNHWC;
  spec.input_channels = kChannels;
  for (int l = 0; l < 6; ++l) {
    ConvLayerSpec layer;
    layer.out_channels = kChannels;
    layer.kernel_size = {3, 3};
    layer.pad_before = {1, 1};
    layer.pad_after = {1, 1};
    layer.weights = RandomTensor(DType::kFloat16, kChannels * kChannels * 9,
                                 std::sqrt(3.0f / (kChannels * 9)), &rng);
    layer.activation.kind = ActivationKind::kRelu;
    spec.layers.push_back(std::move(layer));
  }
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(std::move(spec));
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::unique_ptr<DevicePool> pool = MakePool(/*cuda_graphs=*/true);
  ASSERT_NE(pool, nullptr);
  ASSERT_TRUE(pool->AddGraph(*graph).ok());
  const Shape shape = {1, kChannels, kSize, kSize};
  const std::string input = RandomTensor(DType::kFloat16, kChannels * kSize * kSize, 1.0f, &rng);
  const size_t bytes = input.size();  // the output has the input's shape

  std::vector<void*> in(kRequests, nullptr), out(kRequests, nullptr);
  for (int r = 0; r < kRequests; ++r) {
    ASSERT_EQ(cudaMalloc(&in[r], bytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out[r], bytes), cudaSuccess);
    ASSERT_EQ(CopyToDevice(in[r], input.data(), bytes), cudaSuccess);
    ASSERT_EQ(FillDevice(out[r], 0xFF, bytes), cudaSuccess);  // NaN
  }
  std::vector<Answer> answers(kRequests);
  std::vector<InferCall> calls;
  absl::BlockingCounter done(kRequests);
  for (int r = 0; r < kRequests; ++r) {
    absl::StatusOr<InferCall> call = MakeCall(*graph, shape, input, in[r], out[r], &answers[r]);
    ASSERT_TRUE(call.ok()) << call.status();
    AnswerInto(&answers[r], &done, &*call);
    calls.push_back(*std::move(call));
  }
  for (InferCall& call : calls) pool->Submit(std::move(call));
  done.Wait();
  std::string first;
  for (int r = 0; r < kRequests; ++r) {
    EXPECT_TRUE(answers[r].status.ok()) << "request " << r << ": " << answers[r].status;
    std::string output(bytes, '\0');
    EXPECT_EQ(cudaMemcpy(output.data(), out[r], bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    if (r == 0) {
      first = output;
      size_t unwritten = 0;
      for (size_t i = 0; i + 1 < bytes; i += 2) {
        unwritten += static_cast<uint8_t>(output[i]) == 0xFF &&
                     static_cast<uint8_t>(output[i + 1]) == 0xFF;
      }
      EXPECT_EQ(unwritten, 0u) << "elements left as the NaN fill";
    } else {
      EXPECT_TRUE(output == first) << "request " << r << " differs from request 0";
    }
  }
  for (int r = 0; r < kRequests; ++r) {
    cudaFree(in[r]);
    cudaFree(out[r]);
  }
  int64_t launched_ahead = 0;
  for (const DeviceStats& stats : pool->Stats().devices) launched_ahead += stats.launched_ahead;
  std::printf("several segments: %d requests, %lld launched ahead\n", kRequests,
              static_cast<long long>(launched_ahead));
  EXPECT_EQ(launched_ahead, 0);
  pool->RemoveGraph((*graph)->id());
}

}  // namespace
}  // namespace convserve
