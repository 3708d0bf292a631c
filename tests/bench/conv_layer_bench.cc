// Per-layer GPU time of the cuDNN backend on the shapes of
// tests/bench/conv_shapes.csv: conv + bias + ReLU, batch 1 and 32, float16
// NHWC, float32 NHWC and float32 NCHW. Prints CSV for
// scripts/bench_compare.py, which sets it beside PyTorch on the same GPU
// (scripts/bench_pytorch.py).
//
// Measured with CUDA events around back-to-back runs of the compiled layer on
// device-resident data (no host copies): median over samples of the mean
// time per run. ours_ms launches the layer's plan from C++ each run, as a
// server with --cuda_graphs=false does. ours_graph_ms (--graph_replay)
// captures --calls_per_graph runs of the same bound plan into one CUDA graph
// on this benchmark's own stream and cuDNN handle, replays it back to back
// and divides by the runs in it, the way scripts/bench_pytorch.py times
// PyTorch (give both the same count); nan where the capture fails. Several
// runs a graph: a graph of one short layer replayed back to back measures
// the rate graphs are launched at (a few microseconds from Python), not the
// GPU; inside one graph the layers follow each other as a request's layers
// do in the server's captured graph.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/test_util/random_tensor.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/status_macros.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, shapes, "tests/bench/conv_shapes.csv", "shape list");
ABSL_FLAG(std::string, batches, "1,32", "batch sizes");
ABSL_FLAG(std::string, engine_selection, "heuristic", "heuristic, heuristic_b, fallback, autotune");
ABSL_FLAG(int, autotune_candidates, 12,
          "autotune: candidate engines timed per layer and path (the server's default)");
ABSL_FLAG(int, autotune_knob_candidates, 16,
          "autotune: knob-search candidates per layer (the server's default; 0: off)");
ABSL_FLAG(int, autotune_iterations, 5,
          "autotune: timed samples of 8 runs per candidate (the server's default)");
ABSL_FLAG(int, samples, 15, "timed samples per layer");
ABSL_FLAG(int, runs_per_sample, 20, "back-to-back runs per sample");
ABSL_FLAG(bool, graph_replay, true,
          "also time the layer captured into a CUDA graph by this benchmark (ours_graph_ms)");
ABSL_FLAG(int, calls_per_graph, 10,
          "graph replay: runs of the layer captured into one graph; ours_graph_ms is a replay's "
          "time divided by it (scripts/bench_pytorch.py --calls_per_graph must match)");

ABSL_FLAG(bool, graph_kernels, false,
          "graph replay: also print (on stderr) the kernels one run captured, by name, so a "
          "row says which kernels its time is");
ABSL_FLAG(bool, programmatic_entry, true,
          "enter cuDNN plans admitted by their test by programmatic edges (the server's "
          "default, --programmatic_entry)");
ABSL_FLAG(bool, entry_ab, false,
          "graph replay: also time each row with programmatic entry on and off, alternating "
          "twice, on the same plans (on stderr: ENTRY lines)");
ABSL_FLAG(bool, dependent_launch, true,
          "launch convserve's own kernels as programmatic dependent launches (the server's "
          "default, --dependent_launch)");

namespace convserve {
namespace {

struct ConvShape {
  std::string name;
  int64_t c, h, w, k, r, s, stride, pad, groups;
};

std::vector<ConvShape> ReadShapes(const std::string& path) {
  std::vector<ConvShape> shapes;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = absl::StrSplit(line, ',');
    if (f.size() != 10) continue;
    ConvShape s{f[0]};
    int64_t* fields[] = {&s.c, &s.h, &s.w, &s.k, &s.r, &s.s, &s.stride, &s.pad, &s.groups};
    for (int i = 0; i < 9; ++i) *fields[i] = std::stoll(f[i + 1]);
    shapes.push_back(s);
  }
  return shapes;
}

// The kernels a captured graph launches, in the order first captured, each
// with its grid, block and count ("?" where the driver does not name it).
// cuDNN launches its kernels through the driver, so the names come from there.
std::string GraphKernelNames(cudaGraph_t graph) {
  using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
  using GetName = CUresult (*)(const char**, CUfunction);
  void* get_params = nullptr;
  void* get_name = nullptr;
  cudaDriverEntryPointQueryResult found;
  if (cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", &get_params, 12000,
                                       cudaEnableDefault, &found) != cudaSuccess ||
      cudaGetDriverEntryPointByVersion("cuFuncGetName", &get_name, 12030, cudaEnableDefault,
                                       &found) != cudaSuccess) {
    return "?";
  }
  size_t count = 0;
  if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) return "?";
  std::vector<cudaGraphNode_t> nodes(count);
  if (cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) return "?";
  std::vector<std::pair<std::string, int>> names;
  const auto count_name = [&names](const std::string& name) {
    for (auto& [seen, times] : names) {
      if (seen == name) {
        ++times;
        return;
      }
    }
    names.push_back({name, 1});
  };
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) continue;
    if (type != cudaGraphNodeTypeKernel) {
      count_name(type == cudaGraphNodeTypeMemset ? "(memset)" : "(other node)");
      continue;
    }
    CUDA_KERNEL_NODE_PARAMS params{};
    const char* name = nullptr;
    if (reinterpret_cast<GetParams>(get_params)(node, &params) != CUDA_SUCCESS ||
        reinterpret_cast<GetName>(get_name)(&name, params.func) != CUDA_SUCCESS) {
      name = "?";
    }
    count_name(absl::StrFormat("%s<<<%ux%ux%u,%u>>>", name, params.gridDimX, params.gridDimY,
                               params.gridDimZ, params.blockDimX));
  }
  return absl::StrJoin(names, " | ", [](std::string* out, const auto& entry) {
    absl::StrAppend(out, entry.first, " x", entry.second);
  });
}

// Times an executable's layers captured `calls` times into one CUDA graph,
// replayed back to back between CUDA events (the method bench_pytorch.py
// uses for PyTorch). Owns the stream and cuDNN handle the capture runs on;
// the executable's plans are already bound to its own device buffers.
class GraphReplayTimer {
 public:
  static absl::StatusOr<std::unique_ptr<GraphReplayTimer>> Create() {
    ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
    ASSIGN_OR_RETURN(CudnnHandle handle, CudnnHandle::Create(stream.get()));
    ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create());
    ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create());
    return std::unique_ptr<GraphReplayTimer>(new GraphReplayTimer(
        std::move(stream), std::move(handle), std::move(start), std::move(stop)));
  }

  // Mean milliseconds per call (a replay's time over `calls`) of each sample.
  // With `kernels`, also the kernels the graph launches (GraphKernelNames).
  absl::StatusOr<std::vector<float>> Time(const CudnnExecutable& executable, int calls,
                                          int warmup, int samples, int runs_per_sample,
                                          std::string* kernels) {
    cudaStream_t stream = stream_.get();
    calls = std::max(calls, 1);
    CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    absl::Status enqueued;
    for (int call = 0; call < calls && enqueued.ok(); ++call) {
      for (size_t i = 0; i < executable.plans().size() && enqueued.ok(); ++i) {
        enqueued =
            executable.plans()[i].RunBound(handle_.get(), stream, executable.problems()[i]);
      }
    }
    cudaGraph_t captured = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &captured);
    const auto destroy_graph = [](cudaGraph_t g) { cudaGraphDestroy(g); };
    std::unique_ptr<CUgraph_st, decltype(destroy_graph)> graph(captured, destroy_graph);
    if (!enqueued.ok()) {
      cudaGetLastError();
      return enqueued;
    }
    CUDA_RETURN_IF_ERROR(ended);
    if (kernels != nullptr) *kernels = GraphKernelNames(graph.get());
    cudaGraphExec_t instantiated = nullptr;
    CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&instantiated, graph.get(), 0));
    const auto destroy_exec = [](cudaGraphExec_t e) { cudaGraphExecDestroy(e); };
    std::unique_ptr<CUgraphExec_st, decltype(destroy_exec)> exec(instantiated, destroy_exec);
    for (int i = 0; i < warmup; ++i) CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec.get(), stream));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    std::vector<float> times;
    runs_per_sample = std::max(runs_per_sample, 1);
    for (int i = 0; i < samples; ++i) {
      CUDA_RETURN_IF_ERROR(cudaEventRecord(start_.get(), stream));
      for (int r = 0; r < runs_per_sample; ++r) {
        CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec.get(), stream));
      }
      CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_.get(), stream));
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_.get()));
      float ms = 0;
      CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_.get(), stop_.get()));
      times.push_back(ms / (runs_per_sample * calls));
    }
    return times;
  }

 private:
  GraphReplayTimer(CudaStream stream, CudnnHandle handle, CudaEvent start, CudaEvent stop)
      : stream_(std::move(stream)),
        handle_(std::move(handle)),
        start_(std::move(start)),
        stop_(std::move(stop)) {}

  CudaStream stream_;
  CudnnHandle handle_;
  CudaEvent start_, stop_;
};

float Median(std::vector<float> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int Run() {
  CudnnBackendOptions options;
  absl::StatusOr<EngineSearch> search = ParseEngineSearch(absl::GetFlag(FLAGS_engine_selection));
  if (!search.ok()) {
    std::fprintf(stderr, "%s\n", search.status().ToString().c_str());
    return 2;
  }
  options.selection.search = *search;
  options.selection.autotune_candidates = absl::GetFlag(FLAGS_autotune_candidates);
  options.selection.autotune_knob_candidates = absl::GetFlag(FLAGS_autotune_knob_candidates);
  options.selection.autotune_iterations = absl::GetFlag(FLAGS_autotune_iterations);
  options.programmatic_entry = absl::GetFlag(FLAGS_programmatic_entry);
  absl::StatusOr<std::unique_ptr<CudnnBackend>> backend = CudnnBackend::Create(options);
  if (!backend.ok()) {
    std::fprintf(stderr, "conv_layer_bench: %s\n", backend.status().ToString().c_str());
    return 2;
  }
  std::fprintf(stderr, "%s\n", (*backend)->Describe().c_str());
  std::unique_ptr<GraphReplayTimer> graph_timer;
  if (absl::GetFlag(FLAGS_graph_replay)) {
    absl::StatusOr<std::unique_ptr<GraphReplayTimer>> timer = GraphReplayTimer::Create();
    if (timer.ok()) {
      graph_timer = *std::move(timer);
    } else {
      std::fprintf(stderr, "conv_layer_bench: no graph replay: %s\n",
                   timer.status().ToString().c_str());
    }
  }
  std::printf("# cudnn: %s\n", (*backend)->Describe().c_str());
  const int calls_per_graph = std::max(absl::GetFlag(FLAGS_calls_per_graph), 1);
  std::printf("# method: CUDA events around %d back-to-back runs, median of %d samples; "
              "ours_ms = plan launched from C++ per run (--cuda_graphs=false); "
              "ours_graph_ms = %d runs of the same plan captured by this benchmark into one CUDA "
              "graph, replayed back to back, time per run\n",
              absl::GetFlag(FLAGS_runs_per_sample), absl::GetFlag(FLAGS_samples),
              calls_per_graph);
  std::printf("# calls_per_graph: %d\n", calls_per_graph);
  std::printf("name,batch,dtype,layout,selection,path,engine,ours_ms,ours_graph_ms,config\n");
  std::mt19937_64 rng(1);
  const struct {
    DType dtype;
    Layout layout;
  } variants[] = {{DType::kFloat16, Layout::kNHWC},
                  {DType::kFloat32, Layout::kNHWC},
                  {DType::kFloat32, Layout::kNCHW}};
  for (const ConvShape& shape : ReadShapes(absl::GetFlag(FLAGS_shapes))) {
    for (absl::string_view batch_text : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
      const int64_t batch = std::stoll(std::string(batch_text));
      for (const auto& variant : variants) {
        GraphSpec spec;
        spec.name = shape.name;
        spec.dtype = variant.dtype;
        spec.layout = variant.layout;
        spec.input_channels = shape.c;
        ConvLayerSpec layer;
        layer.out_channels = shape.k;
        layer.kernel_size = {shape.r, shape.s};
        layer.stride = {shape.stride, shape.stride};
        layer.pad_before = {shape.pad, shape.pad};
        layer.pad_after = {shape.pad, shape.pad};
        layer.groups = shape.groups;
        const int64_t fan_in = shape.c / shape.groups * shape.r * shape.s;
        layer.weights = RandomTensor(variant.dtype, shape.k * fan_in, 0.1f, &rng);
        layer.bias = RandomTensor(variant.dtype, shape.k, 0.1f, &rng);
        layer.activation.kind = ActivationKind::kRelu;
        spec.layers.push_back(layer);
        absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(spec);
        const Shape input = {batch, shape.c, shape.h, shape.w};
        absl::StatusOr<std::shared_ptr<Executable>> compiled =
            graph.ok() ? (*backend)->Compile(*graph, input)
                       : absl::StatusOr<std::shared_ptr<Executable>>(graph.status());
        if (!compiled.ok()) {
          std::fprintf(stderr, "%s: %s\n", shape.name.c_str(), compiled.status().ToString().c_str());
          continue;
        }
        auto* executable = static_cast<CudnnExecutable*>(compiled->get());
        // Real data in the input buffer, so timings are not of zeros.
        const std::string host = RandomTensor(variant.dtype, NumElements(input), 1.0f, &rng);
        std::string out(NumElements(executable->output_shape()) * DTypeSize(variant.dtype), 0);
        if (!executable
                 ->Run(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(host.data()),
                                           host.size()),
                       absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), out.size()))
                 .ok()) {
          continue;
        }
        absl::StatusOr<std::vector<float>> times = executable->TimeDeviceRuns(
            3, absl::GetFlag(FLAGS_samples), absl::GetFlag(FLAGS_runs_per_sample));
        if (!times.ok()) {
          std::fprintf(stderr, "%s: %s\n", shape.name.c_str(), times.status().ToString().c_str());
          continue;
        }
        float graph_ms = NAN;
        if (graph_timer != nullptr) {
          std::string kernels;
          absl::StatusOr<std::vector<float>> replays = graph_timer->Time(
              *executable, calls_per_graph, 3, absl::GetFlag(FLAGS_samples),
              absl::GetFlag(FLAGS_runs_per_sample),
              absl::GetFlag(FLAGS_graph_kernels) ? &kernels : nullptr);
          if (replays.ok()) {
            graph_ms = Median(*replays);
            if (!kernels.empty()) {
              std::fprintf(stderr, "%s N=%ld %s %s: graph of %d runs: %s\n", shape.name.c_str(),
                           batch, DTypeName(variant.dtype), LayoutName(variant.layout),
                           calls_per_graph, kernels.c_str());
            }
          } else {
            std::fprintf(stderr, "%s N=%ld %s: graph replay: %s\n", shape.name.c_str(), batch,
                         DTypeName(variant.dtype), replays.status().ToString().c_str());
          }
        }
        if (graph_timer != nullptr && absl::GetFlag(FLAGS_entry_ab)) {
          float on[2] = {NAN, NAN}, off[2] = {NAN, NAN};
          for (int round = 0; round < 2; ++round) {
            for (bool entry : {true, false}) {
              convserve::SetProgrammaticEntry(entry);
              absl::StatusOr<std::vector<float>> t = graph_timer->Time(
                  *executable, calls_per_graph, 3, absl::GetFlag(FLAGS_samples),
                  absl::GetFlag(FLAGS_runs_per_sample), nullptr);
              if (t.ok()) (entry ? on : off)[round] = Median(*t) * 1000;
            }
          }
          convserve::SetProgrammaticEntry(absl::GetFlag(FLAGS_programmatic_entry));
          std::fprintf(stderr, "ENTRY %s N=%ld %s %s %s: on %.2f %.2f off %.2f %.2f us\n",
                       shape.name.c_str(), batch, DTypeName(variant.dtype),
                       LayoutName(variant.layout),
                       executable->plans()[0].programmatic_entry() ? "admitted" : "not admitted",
                       on[0], on[1], off[0], off[1]);
        }
        const ConvLayerPlan& plan = executable->plans()[0];
        std::printf("%s,%ld,%s,%s,%s,%s,%ld,%.5f,%.5f,\"%s\"\n", shape.name.c_str(), batch,
                    DTypeName(variant.dtype), LayoutName(variant.layout),
                    absl::GetFlag(FLAGS_engine_selection).c_str(), LayerPathName(plan.path()),
                    plan.engine_index(), Median(*times), graph_ms, plan.id().ToString().c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace convserve

int main(int argc, char** argv) {
  // Logs on stderr: stdout is the CSV.
  spdlog::set_default_logger(spdlog::stderr_color_mt("bench"));
  absl::ParseCommandLine(argc, argv);
  convserve::SetDependentLaunch(absl::GetFlag(FLAGS_dependent_launch));
  convserve::SetProgrammaticEntry(absl::GetFlag(FLAGS_programmatic_entry));
  return convserve::Run();
}
