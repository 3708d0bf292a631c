// GPU time per request of multi-layer graphs (issue 12 scope 4): the stacks
// of tests/bench/*_stack.textproto, batch 1 and 32, run through the runtime
// path the server runs, DevicePool behind the RequestRunner interface, one
// request at a time. Input and output live in device memory on the worker's
// GPU (TensorMemory kDevice, read and written in place, as for a CUDA
// shared-memory region), so no host<->device copy is in the figures.
//
// Per stack and batch, after --warmup requests (the first builds the plans):
// InferTimings.compute (CUDA events around the request's layers on the
// worker's stream) and the host wall time from Submit to `done`, median and
// mean over --requests requests. Prints CSV for scripts/bench_compare.py
// (--stacks_ours), beside scripts/bench_pytorch_stacks.py. Without a GPU it
// prints why it skipped and exits 0.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "client/graph_file.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/runtime/device_pool.h"
#include "server/proto_convert.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, stacks,
          "tests/bench/resnet50_bottleneck_stack.textproto,"
          "tests/bench/mobilenetv2_block_stack.textproto",
          "graph files of the stacks, comma-separated");
ABSL_FLAG(std::string, input_hw, "56,56", "input H,W of every stack");
ABSL_FLAG(std::string, batches, "1,32", "batch sizes");
ABSL_FLAG(std::string, engine_selection, "autotune",
          "heuristic, heuristic_b, fallback or autotune (the server's default is autotune)");
ABSL_FLAG(std::string, prober_binary, "",
          "convserve-prober for engine searches, as the server runs them; empty: in this process");
ABSL_FLAG(int, autotune_knob_candidates, 16,
          "autotune: knob-search candidates per layer (the server's default; 0: off)");
ABSL_FLAG(bool, fuse_pointwise_pairs, true,
          "race pairs of 1x1 layers run as one kernel against their plans (the server's "
          "default); false: every layer on its own plan");
ABSL_FLAG(int, device, 0, "CUDA device ordinal");
ABSL_FLAG(int, warmup, 50, "untimed requests per stack and batch (the first builds plans)");
ABSL_FLAG(int, requests, 500, "timed requests per stack and batch");
ABSL_FLAG(std::string, cudnn_errata, "",
          "file of extra errata rules (engine configurations never to run), as the server's "
          "--cudnn_errata: e.g. to time a stack without one engine");

ABSL_FLAG(bool, programmatic_entry, true,
          "enter cuDNN plans admitted by their test by programmatic edges (the server's "
          "default, --programmatic_entry)");
ABSL_FLAG(bool, dependent_launch, true,
          "launch convserve's own kernels as programmatic dependent launches (the server's "
          "default, --dependent_launch)");

namespace convserve {
namespace {

struct Sample {
  absl::Status status;
  InferTimings timings;
  double wall_seconds = 0;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? NAN : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

// One request through the pool, waited for on this thread.
Sample RunOne(RequestRunner& runner, const std::shared_ptr<const Graph>& graph,
              const Shape& input_shape, const std::vector<Shape>& layer_outputs,
              const TensorMemory& input, const TensorMemory& output) {
  Sample sample;
  absl::Notification done;
  InferCall call;
  call.graph = graph;
  call.input_shape = input_shape;
  call.layer_outputs = layer_outputs;
  call.input_memory = input;
  call.output_memory = output;
  call.done = [&](const absl::Status& status, const Shape&, const InferTimings& timings) {
    sample.status = status;
    sample.timings = timings;
    done.Notify();
  };
  const auto start = std::chrono::steady_clock::now();
  runner.Submit(std::move(call));
  done.WaitForNotification();
  sample.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return sample;
}

// The output after the warm-up: every value finite and not all zero, so the
// timings are of a stack that computed something.
absl::Status CheckOutput(const TensorMemory& output, DType dtype) {
  std::vector<uint8_t> host(output.bytes);
  if (cudaMemcpy(host.data(), output.data, output.bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
    return absl::InternalError(cudaGetErrorString(cudaGetLastError()));
  }
  const size_t count = output.bytes / DTypeSize(dtype);
  size_t nonzero = 0;
  for (size_t i = 0; i < count; ++i) {
    float value = 0;
    if (dtype == DType::kFloat32) {
      std::memcpy(&value, host.data() + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, host.data() + 2 * i, 2);
      value = dtype == DType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
    }
    if (!std::isfinite(value)) {
      return absl::InternalError(absl::StrCat("output element ", i, " is ", value));
    }
    nonzero += value != 0;
  }
  if (nonzero == 0) return absl::InternalError("the output is all zeros");
  return absl::OkStatus();
}

int Run() {
  const int ordinal = absl::GetFlag(FLAGS_device);
  if (CudaDeviceCount() <= ordinal) {
    std::fprintf(stderr, "stack_bench: skipped: no CUDA device %d visible (%d devices)\n", ordinal,
                 CudaDeviceCount());
    std::printf("# skipped: no CUDA device visible\n");
    return 0;
  }
  absl::StatusOr<EngineSearch> search = ParseEngineSearch(absl::GetFlag(FLAGS_engine_selection));
  if (!search.ok()) {
    std::fprintf(stderr, "stack_bench: %s\n", search.status().ToString().c_str());
    return 2;
  }
  const std::vector<std::string> hw = absl::StrSplit(absl::GetFlag(FLAGS_input_hw), ',');
  if (hw.size() != 2) {
    std::fprintf(stderr, "stack_bench: --input_hw needs H,W\n");
    return 2;
  }
  DevicePoolOptions options;
  options.devices = {ordinal};
  // One worker: requests run one at a time on one stream, so each request
  // finds the GPU idle, as the PyTorch peer's single replays do.
  options.workers_per_device = 1;
  options.selection.search = *search;
  options.selection.autotune_knob_candidates = absl::GetFlag(FLAGS_autotune_knob_candidates);
  options.prober_binary = absl::GetFlag(FLAGS_prober_binary);
  options.fuse_pointwise_pairs = absl::GetFlag(FLAGS_fuse_pointwise_pairs);
  options.errata_file = absl::GetFlag(FLAGS_cudnn_errata);
  absl::StatusOr<std::unique_ptr<DevicePool>> pool = DevicePool::Create(options);
  if (!pool.ok()) {
    std::fprintf(stderr, "stack_bench: %s\n", pool.status().ToString().c_str());
    return 2;
  }
  std::fprintf(stderr, "%s\n", (*pool)->Describe().c_str());
  cudaDeviceProp properties;
  cudaGetDeviceProperties(&properties, ordinal);
  std::printf("# device: %s\n", properties.name);
  // The cuDNN this process loaded (scripts/bench_gpu_time.sh's OURS_CUDNN
  // can pick another than the one it was built against).
  const size_t cudnn = cudnnGetVersion();
  std::printf("# cudnn: runtime %zu.%zu.%zu (compiled against %d.%d.%d)\n", cudnn / 10000,
              cudnn % 10000 / 100, cudnn % 100, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
  std::printf("# selection: %s, pointwise pairs %s\n",
              absl::GetFlag(FLAGS_engine_selection).c_str(),
              absl::GetFlag(FLAGS_fuse_pointwise_pairs) ? "raced" : "off");
  std::printf("# method: DevicePool (1 worker on GPU %d), device-resident input and output in "
              "place; one request at a time; gpu = InferTimings.compute (CUDA events around the "
              "layers), wall = Submit to done on the host; %d requests after %d warm-up\n",
              ordinal, absl::GetFlag(FLAGS_requests), absl::GetFlag(FLAGS_warmup));
  std::printf("stack,batch,dtype,layout,layers,requests,gpu_median_us,gpu_mean_us,wall_median_us,"
              "wall_mean_us,gpu_p90_us,wall_p90_us\n");
  std::fflush(stdout);

  int failures = 0;
  for (absl::string_view path_text : absl::StrSplit(absl::GetFlag(FLAGS_stacks), ',')) {
    const std::string path(path_text);
    absl::StatusOr<v1::GraphDef> def = ReadGraphFile(path);
    absl::Status status = def.status();
    if (status.ok()) status = FillParameters(1, true, &*def);
    absl::StatusOr<GraphSpec> spec =
        status.ok() ? GraphSpecFromProto(&*def) : absl::StatusOr<GraphSpec>(status);
    absl::StatusOr<std::shared_ptr<const Graph>> graph =
        spec.ok() ? Graph::Create(*std::move(spec))
                  : absl::StatusOr<std::shared_ptr<const Graph>>(spec.status());
    if (graph.ok()) status = (*pool)->AddGraph(*graph);
    if (!graph.ok() || !status.ok()) {
      std::fprintf(stderr, "stack_bench: %s: %s\n", path.c_str(),
                   (graph.ok() ? status : graph.status()).ToString().c_str());
      ++failures;
      continue;
    }
    const GraphSpec& g = (*graph)->spec();
    for (absl::string_view batch_text : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
      const Shape input_shape = {std::stoll(std::string(batch_text)), g.input_channels,
                                 std::stoll(hw[0]), std::stoll(hw[1])};
      const std::string label = absl::StrCat(g.name, " N=", input_shape[0]);
      absl::StatusOr<std::vector<Shape>> outputs = (*graph)->InferShapes(input_shape);
      if (!outputs.ok()) {
        std::fprintf(stderr, "stack_bench: %s: %s\n", label.c_str(),
                     outputs.status().ToString().c_str());
        ++failures;
        continue;
      }
      const size_t element = DTypeSize(g.dtype);
      const size_t in_bytes = NumElements(input_shape) * element;
      const size_t out_bytes = NumElements(outputs->back()) * element;
      cudaSetDevice(ordinal);
      absl::StatusOr<DeviceBuffer> in_buffer = DeviceBuffer::Create(in_bytes);
      absl::StatusOr<DeviceBuffer> out_buffer = DeviceBuffer::Create(out_bytes);
      if (!in_buffer.ok() || !out_buffer.ok()) {
        std::fprintf(stderr, "stack_bench: %s: %s\n", label.c_str(),
                     (in_buffer.ok() ? out_buffer.status() : in_buffer.status()).ToString().c_str());
        ++failures;
        continue;
      }
      // Real data, so the timings are not of zeros.
      const std::string host =
          RandomTensorBytes(DataTypeToProto(g.dtype), NumElements(input_shape), 3);
      cudaMemcpy(in_buffer->data(), host.data(), in_bytes, cudaMemcpyHostToDevice);
      TensorMemory input;
      input.kind = TensorMemory::Kind::kDevice;
      input.data = static_cast<uint8_t*>(in_buffer->data());
      input.bytes = in_bytes;
      input.device = ordinal;
      TensorMemory output = input;
      output.data = static_cast<uint8_t*>(out_buffer->data());
      output.bytes = out_bytes;

      absl::Status failed;
      for (int i = 0; i < std::max(absl::GetFlag(FLAGS_warmup), 1) && failed.ok(); ++i) {
        const Sample s = RunOne(**pool, *graph, input_shape, *outputs, input, output);
        failed = s.status;
        if (i == 0 && failed.ok()) {
          std::fprintf(stderr, "%s: first request %.1f ms (plan build %.1f ms)\n", label.c_str(),
                       s.wall_seconds * 1e3, s.timings.build * 1e3);
        }
      }
      if (failed.ok()) failed = CheckOutput(output, g.dtype);
      std::vector<double> gpu, wall;
      for (int i = 0; i < absl::GetFlag(FLAGS_requests) && failed.ok(); ++i) {
        const Sample s = RunOne(**pool, *graph, input_shape, *outputs, input, output);
        failed = s.status;
        gpu.push_back(s.timings.compute * 1e6);
        wall.push_back(s.wall_seconds * 1e6);
      }
      if (!failed.ok()) {
        std::fprintf(stderr, "stack_bench: %s: %s\n", label.c_str(), failed.ToString().c_str());
        ++failures;
        continue;
      }
      std::printf("%s,%ld,%s,%s,%zu,%zu,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f\n", g.name.c_str(),
                  input_shape[0], DTypeName(g.dtype), LayoutName(g.layout), g.layers.size(),
                  gpu.size(), Percentile(gpu, 0.5), Mean(gpu), Percentile(wall, 0.5), Mean(wall),
                  Percentile(gpu, 0.9), Percentile(wall, 0.9));
      std::fflush(stdout);
    }
    (*pool)->RemoveGraph((*graph)->id());
  }
  const EngineSearchStats searches = (*pool)->Stats().engine_search;
  std::printf("# pointwise pairs: %lld raced, %lld fused\n",
              static_cast<long long>(searches.pair_races),
              static_cast<long long>(searches.pairs_fused));
  return failures == 0 ? 0 : 1;
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
