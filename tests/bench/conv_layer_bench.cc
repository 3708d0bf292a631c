// Per-layer GPU time of the cuDNN backend on the shapes of
// tests/bench/conv_shapes.csv: conv + bias + ReLU, batch 1 and 32, float16
// NHWC and float32 NCHW. Prints CSV for scripts/bench_compare.py, which sets
// it beside PyTorch on the same GPU (scripts/bench_pytorch.py).
//
// Measured with CUDA events around back-to-back runs of the compiled layer on
// device-resident data (no host copies): median over samples of the mean
// time per run.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "tests/test_util/random_tensor.h"
#include "engine/cudnn/cudnn_backend.h"

ABSL_FLAG(std::string, shapes, "tests/bench/conv_shapes.csv", "shape list");
ABSL_FLAG(std::string, batches, "1,32", "batch sizes");
ABSL_FLAG(std::string, engine_selection, "heuristic", "heuristic, heuristic_b, fallback, autotune");
ABSL_FLAG(int, samples, 15, "timed samples per layer");
ABSL_FLAG(int, runs_per_sample, 20, "back-to-back runs per sample");

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

int Run() {
  CudnnBackendOptions options;
  absl::StatusOr<EngineSearch> search = ParseEngineSearch(absl::GetFlag(FLAGS_engine_selection));
  if (!search.ok()) {
    std::fprintf(stderr, "%s\n", search.status().ToString().c_str());
    return 2;
  }
  options.selection.search = *search;
  absl::StatusOr<std::unique_ptr<CudnnBackend>> backend = CudnnBackend::Create(options);
  if (!backend.ok()) {
    std::fprintf(stderr, "conv_layer_bench: %s\n", backend.status().ToString().c_str());
    return 2;
  }
  std::fprintf(stderr, "%s\n", (*backend)->Describe().c_str());
  std::printf("name,batch,dtype,layout,selection,path,engine,ours_ms\n");
  std::mt19937_64 rng(1);
  const struct {
    DType dtype;
    Layout layout;
  } variants[] = {{DType::kFloat16, Layout::kNHWC}, {DType::kFloat32, Layout::kNCHW}};
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
        std::sort(times->begin(), times->end());
        const ConvLayerPlan& plan = executable->plans()[0];
        std::printf("%s,%ld,%s,%s,%s,%s,%ld,%.5f\n", shape.name.c_str(), batch,
                    DTypeName(variant.dtype), LayoutName(variant.layout),
                    absl::GetFlag(FLAGS_engine_selection).c_str(), LayerPathName(plan.path()),
                    plan.engine_index(), (*times)[times->size() / 2]);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace convserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return convserve::Run();
}
