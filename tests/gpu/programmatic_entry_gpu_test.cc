// Programmatic entry into cuDNN's plans (engine/cudnn/programmatic_entry.h):
// 1. TestProgrammaticEntry admits a copy kernel that waits for the kernel
//    before it, and refuses one that reads its input before it waits, one
//    that writes its output before it waits, and the waiting one after a
//    memset (only a kernel can wait); each leaves the input as it found it.
//    A launch whose first run is slow (as a cuDNN plan's can be, loading
//    its kernels) is held back by its second run's time, not its first's;
//    one whose every run is too slow to hold back is refused untested.
// 2. Autotune's cuDNN winner (convserve's own kernels left out) of seeded
//    random layers (every dtype and layout, odd sizes, 1x1 to 5x5, strides
//    1 and 2) and of two benchmark layers at batch 32, searched as the
//    server searches (SearchOptions::programmatic_entry): the search
//    reports a verdict for the winner and, admitted, its time entered
//    programmatically, and testing the plan again gives the same verdict.
//    An admitted plan, run three times in one captured graph, is entered
//    by programmatic edges, and each replay into a NaN-filled output
//    writes the bits a plain run writes, within the float64 reference's
//    bound. Prints the verdicts and how many were admitted.
// Skips without a GPU, and the checks of admission below compute
// capability 9.0 (there nothing is admitted).
//
// CONVSERVE_ENTRY_SEED and CONVSERVE_ENTRY_CASES change the random layers.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/direct_conv_kernel.h"
#include "engine/cudnn/programmatic_entry.h"
#include "gtest/gtest.h"
#include "tests/test_util/cudnn_device_test.h"

namespace convserve {
namespace {

// The random-graph oracle's bounds for cuDNN's engines (relative L2):
// some float16 engines accumulate in float16.
double CudnnBound(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 2e-3;
    case DType::kFloat16: return 1e-2;
    case DType::kBFloat16: return 2e-2;
  }
  return 0;
}

bool Hopper() { return CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMajor, 0) >= 9; }

std::string DeviceBytes(const void* data, size_t bytes) {
  std::string host(bytes, '\0');
  EXPECT_EQ(cudaMemcpy(host.data(), data, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// Programmatic edges of `graph`.
size_t ProgrammaticEdges(cudaGraph_t graph) {
  size_t count = 0;
  EXPECT_EQ(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> data(count);
  EXPECT_EQ(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &count), cudaSuccess);
  size_t programmatic = 0;
  for (const cudaGraphEdgeData& edge : data) {
    programmatic += edge.type == cudaGraphDependencyTypeProgrammatic;
  }
  return programmatic;
}

LayerCase DrawCase(std::mt19937_64* rng) {
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  LayerCase c;
  c.dtype = dtypes[DrawInRange(rng, 0, 2)];
  c.channels_last = DrawInRange(rng, 0, 1) == 1;
  c.batch = DrawInRange(rng, 1, 4);
  c.channels = DrawInRange(rng, 0, 1) == 1 ? 8 * DrawInRange(rng, 1, 16) : DrawInRange(rng, 3, 70);
  c.out_channels =
      DrawInRange(rng, 0, 1) == 1 ? 8 * DrawInRange(rng, 1, 16) : DrawInRange(rng, 5, 90);
  c.height = DrawInRange(rng, 5, 33);
  c.width = DrawInRange(rng, 5, 33);
  const int64_t kernels[] = {1, 3, 5};
  c.kernel_h = c.kernel_w = kernels[DrawInRange(rng, 0, 2)];
  c.stride_h = c.stride_w = DrawInRange(rng, 1, 2);
  c.pad_top = c.pad_bottom = c.pad_left = c.pad_right = c.kernel_h / 2;
  c.bias = DrawInRange(rng, 0, 3) != 0;
  c.activation = DrawActivation(rng);
  return c;
}

// Benchmark layers where both PyTorch and convserve run cuDNN at batch 32:
// float16 NHWC 1x1 1024->256 @ 14 and the 1x1 stride-2 256->512 downsample.
std::vector<LayerCase> BenchmarkCases() {
  LayerCase a;
  a.name = "resnet50_14_1x1_1024_256";
  a.dtype = DType::kFloat16;
  a.channels_last = true;
  a.batch = 32;
  a.channels = 1024;
  a.out_channels = 256;
  a.height = a.width = 14;
  a.kernel_h = a.kernel_w = 1;
  a.activation.kind = ActivationKind::kRelu;
  LayerCase b = a;
  b.name = "resnet50_downsample_1x1s2_256_512";
  b.channels = 256;
  b.out_channels = 512;
  b.height = b.width = 56;
  b.stride_h = b.stride_w = 2;
  return {a, b};
}

class ProgrammaticEntryTest : public CudnnDeviceTest {
 protected:
  // The layer's autotuned cuDNN plan through AdmitProgrammaticEntry; an
  // admitted plan is then replayed three times in one graph against a
  // plain run. Returns the replays' relative L2 error (0 when refused).
  double CheckLayer(const LayerCase& c, std::mt19937_64* rng, int* admitted) {
    const PreparedLayer layer = Prepare(c, rng);
    if (!layer.ok) return INFINITY;
    std::optional<ConvLayerPlan> plan;
    SearchOptions options;
    options.programmatic_entry = true;
    absl::StatusOr<SearchReport> report =
        Autotune(layer.problem, /*direct=*/false, &plan, options);
    EXPECT_TRUE(report.ok()) << report.status();
    if (!report.ok() || !plan.has_value()) return INFINITY;
    // The search's verdict on its winner: in the winner's result and plan.
    const bool searched_entry = plan->programmatic_entry();
    std::string searched_detail;
    float searched_ms = 0;
    for (const CandidateResult& result : report->results) {
      if (!result.ok || result.id != plan->id()) continue;
      searched_detail = result.detail;
      searched_ms = result.ms;
    }
    EXPECT_NE(searched_detail.find(searched_entry ? "timed entered programmatically"
                                                  : "programmatic entry"),
              std::string::npos)
        << plan->id().ToString() << ": " << searched_detail;
    EXPECT_FLOAT_EQ(searched_ms, plan->measured_ms()) << "the report gives the winner's last time";
    absl::StatusOr<EntryVerdict> verdict =
        AdmitProgrammaticEntry(*plan, layer.problem, handle_.get(), stream_.get());
    EXPECT_TRUE(verdict.ok()) << verdict.status();
    if (!verdict.ok()) return INFINITY;
    std::printf("entry %-40s %s: %s (%s; searched: %s)\n", c.Describe().c_str(),
                plan->id().ToString().c_str(), verdict->admitted ? "admitted" : "refused",
                verdict->detail.c_str(), searched_detail.c_str());
    EXPECT_EQ(plan->programmatic_entry(), verdict->admitted);
    EXPECT_EQ(verdict->admitted, searched_entry) << "the same verdict at search and at build";
    if (!Hopper()) EXPECT_FALSE(verdict->admitted);
    if (!verdict->admitted) return 0;
    ++*admitted;

    const double plain = RunGuarded(*plan, layer);
    absl::StatusOr<DeviceBuffer> y = DeviceBuffer::Create(layer.output_bytes + kGuardBytes);
    EXPECT_TRUE(y.ok());
    if (!y.ok()) return INFINITY;
    EXPECT_EQ(FillDevice(y->data(), kFill, y->bytes()), cudaSuccess);
    // RunGuarded bound the plan to its own output, now freed: same input,
    // weights and workspace size, this output.
    ConvLayerBuffers buffers;
    absl::StatusOr<DeviceBuffer> workspace =
        DeviceBuffer::Create(std::max<int64_t>(plan->workspace_bytes(), 256));
    EXPECT_TRUE(workspace.ok());
    if (!workspace.ok()) return INFINITY;
    buffers.x = layer.x.data();
    buffers.w = layer.weights->weights(0);
    buffers.w_tf32 = layer.weights->tf32_weights(0);
    buffers.bias = layer.weights->bias(0);
    buffers.y = y->data();
    buffers.workspace = workspace->data();
    EXPECT_TRUE(plan->Bind(layer.problem, buffers).ok());
    EXPECT_TRUE(plan->RunBound(handle_.get(), stream_.get(), layer.problem).ok());
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    const std::string bits = DeviceBytes(y->data(), layer.output_bytes);

    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal),
              cudaSuccess);
    absl::Status ran;
    for (int run = 0; run < 3 && ran.ok(); ++run) {
      ran = plan->RunBound(handle_.get(), stream_.get(), layer.problem);
    }
    EXPECT_EQ(cudaStreamEndCapture(stream_.get(), &graph), cudaSuccess);
    EXPECT_TRUE(ran.ok()) << ran;
    if (graph == nullptr) return INFINITY;
    EXPECT_GE(ProgrammaticEdges(graph), 2u) << "runs 2 and 3 are entered programmatically";
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    double worst = plain;
    for (int replay = 0; replay < 3 && exec != nullptr; ++replay) {
      EXPECT_EQ(FillDevice(y->data(), kFill, y->bytes()), cudaSuccess);
      EXPECT_EQ(cudaGraphLaunch(exec, stream_.get()), cudaSuccess);
      worst = std::max(worst, ReadGuarded(*y, layer.output_bytes, c.dtype, layer.expected, true));
      EXPECT_EQ(DeviceBytes(y->data(), layer.output_bytes), bits) << "replay " << replay;
    }
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return worst;
  }
};

TEST_F(ProgrammaticEntryTest, AdmitsOnlyKernelsThatWaitForTheKernelBefore) {
  if (!Hopper()) GTEST_SKIP() << "programmatic launches need compute capability 9.0";
  constexpr size_t kBytes = 100000;
  std::mt19937_64 rng(5);
  std::string input(kBytes, '\0');
  for (char& byte : input) byte = static_cast<char>(rng() % 255);  // never the poison 0xFF
  absl::StatusOr<DeviceBuffer> in = DeviceBuffer::Create(kBytes);
  absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Create(kBytes);
  absl::StatusOr<DeviceBuffer> workspace = DeviceBuffer::Create(4096);
  ASSERT_TRUE(in.ok() && out.ok() && workspace.ok());
  ASSERT_EQ(cudaMemcpy(in->data(), input.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  EntryTestBuffers buffers{in->data(), kBytes, out->data(), kBytes, workspace->data(), 4096};
  const struct {
    EntryTestCopy kind;
    bool memset_first;  // a memset node before the kernel
    bool admitted;
    const char* detail;
  } cases[] = {{EntryTestCopy::kWaits, false, true, "waited"},
               {EntryTestCopy::kReadsEarly, false, false, "read its input"},
               {EntryTestCopy::kWritesEarly, false, false, "before the kernel before it ended"},
               {EntryTestCopy::kWaits, true, false, "first node is not a kernel"}};
  for (const auto& c : cases) {
    absl::StatusOr<EntryVerdict> verdict = TestProgrammaticEntry(
        [&](cudaStream_t s) -> absl::Status {
          if (c.memset_first && cudaMemsetAsync(out->data(), 0, kBytes, s) != cudaSuccess) {
            return absl::InternalError("cudaMemsetAsync failed");
          }
          return LaunchCopyForTesting(c.kind, in->data(), out->data(), kBytes, s);
        },
        buffers, stream_.get());
    ASSERT_TRUE(verdict.ok()) << verdict.status();
    std::printf("copy kind %d%s: %s (%s)\n", static_cast<int>(c.kind),
                c.memset_first ? " after a memset" : "",
                verdict->admitted ? "admitted" : "refused", verdict->detail.c_str());
    EXPECT_EQ(verdict->admitted, c.admitted) << verdict->detail;
    EXPECT_NE(verdict->detail.find(c.detail), std::string::npos) << verdict->detail;
    EXPECT_EQ(DeviceBytes(in->data(), kBytes), input) << "the input is put back";
  }
}

// Queues on `stream` a host function that sleeps `ms` milliseconds.
cudaError_t SleepOnStream(cudaStream_t stream, int* ms) {
  return cudaLaunchHostFunc(
      stream,
      [](void* data) {
        std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(data)));
      },
      ms);
}

TEST_F(ProgrammaticEntryTest, HoldsTheInputBackBySteadyRunsOnly) {
  if (!Hopper()) GTEST_SKIP() << "programmatic launches need compute capability 9.0";
  constexpr size_t kBytes = 4096;
  absl::StatusOr<DeviceBuffer> in = DeviceBuffer::Create(kBytes);
  absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Create(kBytes);
  ASSERT_TRUE(in.ok() && out.ok());
  ASSERT_EQ(cudaMemset(in->data(), 1, kBytes), cudaSuccess);
  EntryTestBuffers buffers{in->data(), kBytes, out->data(), kBytes, nullptr, 0};
  // The waiting copy, its first `slow_runs` runs held `sleep_ms` by the
  // host first; `runs` counts its runs.
  int sleep_ms = 0, slow_runs = 0, runs = 0;
  const auto test = [&](const char* name) {
    runs = 0;
    absl::StatusOr<EntryVerdict> verdict = TestProgrammaticEntry(
        [&](cudaStream_t s) -> absl::Status {
          if (runs++ < slow_runs && SleepOnStream(s, &sleep_ms) != cudaSuccess) {
            return absl::InternalError("cudaLaunchHostFunc failed");
          }
          return LaunchCopyForTesting(EntryTestCopy::kWaits, in->data(), out->data(), kBytes, s);
        },
        buffers, stream_.get());
    if (verdict.ok()) {
      std::printf("%s: %s (%s)\n", name, verdict->admitted ? "admitted" : "refused",
                  verdict->detail.c_str());
    }
    return verdict;
  };
  // A slow first run (one-time work, 300 ms): held back by the second's
  // time, a few microseconds, so the late kernel runs 0.2 ms, not 2.4 s.
  sleep_ms = 300;
  slow_runs = 1;
  absl::StatusOr<EntryVerdict> verdict = test("slow first run");
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_TRUE(verdict->admitted) << verdict->detail;
  double held_ms = 0;
  ASSERT_EQ(std::sscanf(verdict->detail.c_str(), "waited for a kernel that ran %lf ms", &held_ms),
            1)
      << verdict->detail;
  EXPECT_LT(held_ms, 20.0);
  // Every plain run slow (25 ms): 8 runs are over the most it holds back.
  sleep_ms = 25;
  slow_runs = 2;
  verdict = test("slow runs");
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_FALSE(verdict->admitted);
  EXPECT_NE(verdict->detail.find("too long to hold its input back"), std::string::npos)
      << verdict->detail;
  EXPECT_EQ(runs, 2) << "refused before the captured run";
}

TEST_F(ProgrammaticEntryTest, AutotunedCudnnPlansAreTestedAndEnteredAsAdmitted) {
  ASSERT_TRUE(DependentLaunchEnabled());
  const uint64_t seed = EnvOr("CONVSERVE_ENTRY_SEED", 20261207);
  const uint64_t count = EnvOr("CONVSERVE_ENTRY_CASES", 24);
  int admitted = 0;
  CheckRandomCases(
      "programmatic entry", seed, count, DrawCase,
      [&](const LayerCase& c, std::mt19937_64* rng) {
        const double error = CheckLayer(c, rng, &admitted);
        EXPECT_LE(error, CudnnBound(c.dtype)) << c.Describe();
        return error;
      },
      CudnnBound);
  std::mt19937_64 rng(seed + 1);
  for (const LayerCase& c : BenchmarkCases()) {
    const double error = CheckLayer(c, &rng, &admitted);
    EXPECT_LE(error, CudnnBound(c.dtype)) << c.name;
  }
  std::printf("programmatic entry: %d of %llu plans admitted\n", admitted,
              static_cast<unsigned long long>(count + BenchmarkCases().size()));
}

}  // namespace
}  // namespace convserve
