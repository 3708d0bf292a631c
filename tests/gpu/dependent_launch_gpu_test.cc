// Programmatic dependent launch of convserve's own kernels
// (engine/cudnn/dependent_launch.h) on seeded random chains of layers that
// only our kernels run: the narrow GEMM first (3-8 input channels), then
// 3x3 and 1x1 layers on a random direct configuration (the implicit,
// pointwise or halo GEMM, which release the next kernel at their last
// tile), depthwise 3x3 and the pointwise pair, in float16 or bfloat16 NHWC,
// odd sizes, every activation. Each kernel reads the previous one's output
// and writes the buffer the one before it read (two buffers,
// alternating), so a kernel that touched a tensor before the
// previous kernel had finished would read a half-written input or overwrite
// an input still being read. Per chain:
// 1. plain launches, the stream synchronized after every kernel: the
//    output is checked against the float64 reference and its bits are the
//    ones to match;
// 2. dependent launch on, the chain captured into one CUDA graph: one
//    programmatic edge between each two kernels on compute capability 9.0+
//    (none below), and three replays, each into NaN-filled buffers, give
//    the same bits;
// 3. dependent launch off, captured: no programmatic edge, the same bits.
// It prints each chain's replay time both ways (a figure, not a check).
// Skips without a GPU.
//
// CONVSERVE_CHAIN_SEED and CONVSERVE_CHAIN_CASES change the chains.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/graph_file.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/device_weights.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/direct_conv_kernel.h"
#include "engine/cudnn/pointwise_pair.h"
#include "engine/cudnn/pointwise_pair_kernel.h"
#include "engine/status_macros.h"
#include "gtest/gtest.h"
#include "server/proto_convert.h"
#include "tests/test_util/cudnn_device_test.h"
#include "tests/test_util/device_setup.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/random_tensor.h"

namespace convserve {
namespace {

// The random-graph oracle's bounds for whole graphs (relative L2).
double Bound(DType dtype) { return dtype == DType::kFloat16 ? 1e-2 : 2e-2; }

constexpr auto Draw = DrawInRange;

void AddLayer(v1::GraphDef* graph, int64_t out_channels, int64_t kernel, int64_t groups,
              std::mt19937_64* rng) {
  v1::ConvLayer* layer = graph->add_layers();
  layer->set_out_channels(static_cast<int32_t>(out_channels));
  layer->set_groups(static_cast<int32_t>(groups));
  for (int d = 0; d < 2; ++d) {
    layer->add_kernel_size(static_cast<int32_t>(kernel));
    layer->add_pad_before(static_cast<int32_t>(kernel / 2));
    layer->add_pad_after(static_cast<int32_t>(kernel / 2));
  }
  v1::Activation* activation = layer->mutable_activation();
  activation->set_kind(static_cast<v1::Activation::Kind>(Draw(rng, 0, 8)));
  if (activation->kind() == v1::Activation::RELU && Draw(rng, 0, 2) == 0) {
    activation->set_upper_clip(6.0f);
  }
}

// A chain: its graph and input shape, and which layers run as one pair
// kernel with the next (`pair_first`).
struct Chain {
  std::shared_ptr<const Graph> graph;
  Shape input_shape;
  std::vector<bool> pair_first;
  std::string Describe() const {
    std::string text = absl::StrCat(DTypeName(graph->spec().dtype), " x",
                                    ShapeToString(input_shape), ":");
    for (size_t i = 0; i < graph->spec().layers.size(); ++i) {
      const ConvLayerSpec& layer = graph->spec().layers[i];
      absl::StrAppend(&text, " ", layer.kernel_size[0], "x", layer.kernel_size[1],
                      layer.groups > 1 ? "dw" : "", "->", layer.out_channels,
                      pair_first[i] ? " (pair" : "",
                      i > 0 && pair_first[i - 1] ? ")" : "");
    }
    return text;
  }
};

Chain DrawChain(uint64_t seed, std::mt19937_64* rng) {
  v1::GraphDef def;
  def.set_name(absl::StrCat("chain_", seed));
  def.set_data_type(Draw(rng, 0, 1) == 0 ? v1::FLOAT16 : v1::BFLOAT16);
  def.set_layout(v1::NHWC);
  const int64_t input_channels = Draw(rng, 3, 8);
  def.set_input_channels(static_cast<int32_t>(input_channels));
  Chain chain;
  int64_t channels = 32 * Draw(rng, 1, 2);
  AddLayer(&def, channels, 3, 1, rng);  // the narrow GEMM
  chain.pair_first.push_back(false);
  const int64_t kernels = Draw(rng, 4, 7);
  for (int64_t k = 1; k < kernels; ++k) {
    switch (Draw(rng, 0, 3)) {
      case 0:  // implicit GEMM 3x3
        channels = 32 * Draw(rng, 1, 2);
        AddLayer(&def, channels, 3, 1, rng);
        chain.pair_first.push_back(false);
        break;
      case 1:  // implicit GEMM 1x1
        channels = 32 * Draw(rng, 1, 3);
        AddLayer(&def, channels, 1, 1, rng);
        chain.pair_first.push_back(false);
        if (channels > 64) {  // back to a pair's or depthwise's input
          channels = 32 * Draw(rng, 1, 2);
          AddLayer(&def, channels, 3, 1, rng);
          chain.pair_first.push_back(false);
          ++k;
        }
        break;
      case 2:  // depthwise 3x3
        AddLayer(&def, channels, 3, channels, rng);
        chain.pair_first.push_back(false);
        break;
      case 3:  // the pointwise pair
        AddLayer(&def, 32 * Draw(rng, 1, 8), 1, 1, rng);
        channels = 32 * Draw(rng, 1, 2);
        AddLayer(&def, channels, 1, 1, rng);
        chain.pair_first.push_back(true);
        chain.pair_first.push_back(false);
        break;
    }
  }
  chain.input_shape = {Draw(rng, 1, 3), input_channels, Draw(rng, 5, 41), Draw(rng, 5, 41)};
  absl::Status filled = FillParameters(seed, /*with_bias=*/true, &def);
  EXPECT_TRUE(filled.ok()) << filled;
  for (v1::ConvLayer& layer : *def.mutable_layers()) {
    if (Draw(rng, 0, 2) == 0) layer.clear_bias();
  }
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&def);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return chain;
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(*std::move(spec));
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (graph.ok()) chain.graph = *std::move(graph);
  return chain;
}

// Programmatic edges of `graph` and all its edges.
struct EdgeCount {
  size_t programmatic = 0, all = 0;
};
EdgeCount CountEdges(cudaGraph_t graph) {
  EdgeCount count;
  size_t edges = 0;
  EXPECT_EQ(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges), cudaSuccess);
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  std::vector<cudaGraphEdgeData> data(edges);
  EXPECT_EQ(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &edges), cudaSuccess);
  count.all = edges;
  for (const cudaGraphEdgeData& edge : data) {
    count.programmatic += edge.type == cudaGraphDependencyTypeProgrammatic;
  }
  return count;
}

class DependentLaunchTest : public CudnnDeviceTest {
 protected:
  void TearDown() override { SetDependentLaunch(true); }

  // A chain made ready to run: plans for the layers that run alone (a
  // random configuration of the direct path each), weights, input and the
  // two buffers the kernels alternate between.
  struct Ready {
    std::vector<ConvLayerProblem> problems;
    std::vector<std::optional<ConvLayerPlan>> plans;
    std::vector<PointwisePairGrid> pair_grids;  // at each pair's first layer
    std::unique_ptr<DeviceWeights> weights;
    DeviceBuffer x, buffers[2];
    size_t output_bytes = 0;
    int kernels = 0;
  };

  absl::Status MakeReady(const Chain& chain, std::mt19937_64* rng, Ready* ready) {
    const Graph& graph = *chain.graph;
    ASSIGN_OR_RETURN(std::vector<Shape> outputs, graph.InferShapes(chain.input_shape));
    ready->problems = MakeLayerProblems(graph, chain.input_shape, outputs);
    EngineSelection selection;
    ConvLayerPlanner planner(handle_.get(), selection, target_);
    size_t largest = 0;
    for (size_t i = 0; i < ready->problems.size(); ++i) {
      const ConvLayerProblem& problem = ready->problems[i];
      largest = std::max<size_t>(largest, NumElements(problem.output) * DTypeSize(problem.dtype));
      ready->plans.emplace_back();
      ready->pair_grids.emplace_back();
      if (i > 0 && chain.pair_first[i - 1]) continue;
      ++ready->kernels;
      if (chain.pair_first[i]) {
        ASSIGN_OR_RETURN(const int64_t limit, PointwisePairSharedLimit());
        const std::string rejection =
            PointwisePairRejection(problem, ready->problems[i + 1], limit);
        if (!rejection.empty()) return absl::InternalError(rejection);
        ASSIGN_OR_RETURN(const std::vector<PointwisePairGrid> grids,
                         PointwisePairGrids(problem, ready->problems[i + 1]));
        ready->pair_grids[i] = grids[(*rng)() % grids.size()];
        continue;
      }
      std::vector<EngineConfigId> configs;
      for (const EngineConfigId& id : DirectConvConfigs(problem)) {
        if (DirectConfigRejection(problem, id).empty()) configs.push_back(id);
      }
      if (configs.empty()) {
        return absl::InternalError(absl::StrCat("no direct configuration runs layer ", i, ": ",
                                                DirectConvRejection(problem)));
      }
      ASSIGN_OR_RETURN(ready->plans[i],
                       planner.BuildConfig(problem, configs[(*rng)() % configs.size()]));
    }
    ready->output_bytes =
        NumElements(ready->problems.back().output) * DTypeSize(ready->problems.back().dtype);
    ASSIGN_OR_RETURN(ready->weights, DeviceWeights::Upload(graph, 0, /*tf32_copies=*/true));
    for (DeviceBuffer& buffer : ready->buffers) {
      ASSIGN_OR_RETURN(buffer, DeviceBuffer::Create(largest));
    }
    return absl::OkStatus();
  }

  // Queues the chain on the stream; with `synchronize`, waits after each
  // kernel. Returns which buffer holds the output.
  absl::StatusOr<int> Queue(const Chain& chain, Ready& ready, bool synchronize) {
    const void* input = ready.x.data();
    int out = 0;
    for (size_t i = 0; i < ready.problems.size(); ++i) {
      if (i > 0 && chain.pair_first[i - 1]) continue;
      void* y = ready.buffers[out].data();
      if (chain.pair_first[i]) {
        PointwisePairBuffers b;
        b.x = input;
        b.w0 = ready.weights->weights(i);
        b.bias0 = ready.weights->bias(i);
        b.w1 = ready.weights->weights(i + 1);
        b.bias1 = ready.weights->bias(i + 1);
        b.y = y;
        RETURN_IF_ERROR(LaunchPointwisePair(ready.problems[i], ready.problems[i + 1], b,
                                            ready.pair_grids[i], stream_.get()));
      } else {
        ConvLayerBuffers b;
        b.x = input;
        b.w = ready.weights->weights(i);
        b.w_tf32 = ready.weights->tf32_weights(i);
        b.w_narrow = ready.weights->narrow_weights(i);
        b.bias = ready.weights->bias(i);
        b.y = y;
        RETURN_IF_ERROR(ready.plans[i]->Bind(ready.problems[i], b));
        RETURN_IF_ERROR(ready.plans[i]->RunBound(handle_.get(), stream_.get(), ready.problems[i]));
      }
      if (synchronize) CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
      input = y;
      out ^= 1;
    }
    return out ^ 1;
  }

  std::string Fetch(const DeviceBuffer& buffer, size_t bytes) {
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    std::string bytes_out(bytes, '\0');
    EXPECT_EQ(cudaMemcpy(bytes_out.data(), buffer.data(), bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return bytes_out;
  }

  // Captures the chain with dependent launch `on`, checks its edges, and
  // replays it three times into NaN-filled buffers expecting `expected`'s
  // bits; returns a replay's time in microseconds (median of 20).
  double CaptureAndReplay(const Chain& chain, Ready& ready, bool on, const std::string& expected) {
    SetDependentLaunch(on);
    SCOPED_TRACE(on ? "dependent launch on" : "dependent launch off");
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal),
              cudaSuccess);
    absl::StatusOr<int> out = Queue(chain, ready, false);
    EXPECT_EQ(cudaStreamEndCapture(stream_.get(), &graph), cudaSuccess);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok() || graph == nullptr) return INFINITY;
    const EdgeCount edges = CountEdges(graph);
    const bool hopper = CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMajor, 0) >= 9;
    EXPECT_EQ(edges.all, static_cast<size_t>(ready.kernels - 1));
    EXPECT_EQ(edges.programmatic, on && hopper ? edges.all : 0u);
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    cudaGraphDestroy(graph);
    if (exec == nullptr) return INFINITY;
    for (int replay = 0; replay < 3; ++replay) {
      for (DeviceBuffer& buffer : ready.buffers) {
        EXPECT_EQ(cudaMemsetAsync(buffer.data(), kFill, buffer.bytes(), stream_.get()),
                  cudaSuccess);
      }
      EXPECT_EQ(cudaGraphLaunch(exec, stream_.get()), cudaSuccess);
      EXPECT_TRUE(Fetch(ready.buffers[*out], ready.output_bytes) == expected)
          << "replay " << replay << " differs from the synchronized run";
    }
    std::vector<float> times;
    cudaEvent_t start = nullptr, stop = nullptr;
    EXPECT_EQ(cudaEventCreate(&start), cudaSuccess);
    EXPECT_EQ(cudaEventCreate(&stop), cudaSuccess);
    for (int i = 0; i < 20; ++i) {
      float ms = 0;
      cudaEventRecord(start, stream_.get());
      cudaGraphLaunch(exec, stream_.get());
      cudaEventRecord(stop, stream_.get());
      EXPECT_EQ(cudaEventSynchronize(stop), cudaSuccess);
      cudaEventElapsedTime(&ms, start, stop);
      times.push_back(ms);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGraphExecDestroy(exec);
    std::nth_element(times.begin(), times.begin() + 10, times.end());
    return 1e3 * times[10];
  }
};

TEST_F(DependentLaunchTest, RandomChainsOfOwnKernelsKeepTheStreamOrder) {
  const uint64_t seed = EnvOr("CONVSERVE_CHAIN_SEED", 20261128);
  const uint64_t count = EnvOr("CONVSERVE_CHAIN_CASES", 12);
  std::mt19937_64 rng(seed);
  double worst[2] = {0, 0};
  for (uint64_t i = 0; i < count; ++i) {
    const Chain chain = DrawChain(seed + i, &rng);
    ASSERT_NE(chain.graph, nullptr);
    SCOPED_TRACE(absl::StrCat("seed ", seed, " chain ", i, ": ", chain.Describe()));
    const DType dtype = chain.graph->spec().dtype;
    Ready ready;
    const absl::Status made = MakeReady(chain, &rng, &ready);
    ASSERT_TRUE(made.ok()) << made;
    const std::string input =
        RandomTensor(dtype, NumElements(chain.input_shape), 1.0f, &rng);
    absl::StatusOr<DeviceBuffer> x = DeviceBuffer::Create(input.size());
    ASSERT_TRUE(x.ok()) << x.status();
    ready.x = *std::move(x);
    ASSERT_EQ(CopyToDevice(ready.x.data(), input.data(), input.size()), cudaSuccess);
    Shape output_shape;
    const std::vector<double> reference =
        NaiveForward(*chain.graph, chain.input_shape, input, &output_shape);

    SetDependentLaunch(false);
    absl::StatusOr<int> out = Queue(chain, ready, true);
    ASSERT_TRUE(out.ok()) << out.status();
    const std::string expected = Fetch(ready.buffers[*out], ready.output_bytes);
    const double error = RelativeL2Error(DecodeToDouble(dtype, expected), reference);
    EXPECT_LE(error, Bound(dtype));
    worst[dtype == DType::kFloat16 ? 0 : 1] =
        std::max(worst[dtype == DType::kFloat16 ? 0 : 1], error);

    const double on_us = CaptureAndReplay(chain, ready, true, expected);
    const double off_us = CaptureAndReplay(chain, ready, false, expected);
    std::printf("chain %llu (%d kernels): %.2f us a replay with dependent launch, %.2f without\n",
                static_cast<unsigned long long>(i), ready.kernels, on_us, off_us);
    if (HasFailure()) return;
  }
  std::printf("dependent launch chains, seed %llu, %llu chains: max relative L2 float16 %.3e "
              "(bound %.0e), bfloat16 %.3e (bound %.0e)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(count),
              worst[0], Bound(DType::kFloat16), worst[1], Bound(DType::kBFloat16));
}

}  // namespace
}  // namespace convserve
