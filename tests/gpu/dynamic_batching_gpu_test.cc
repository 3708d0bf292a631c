// Dynamic batching on the GPU device pool: batches of seeded random graphs
// (every dtype and layout, odd sizes) whose calls read and write message
// bytes, page-locked host buffers and device memory, each call's output
// checked against the CPU backend on its own input; one call whose copy
// fails and one cancelled call among batch-mates; a DynamicBatcher under 64
// concurrent calls forming batches larger than 1. Skips without a GPU.
#include <cuda_runtime_api.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/runtime/device_pool.h"
#include "engine/runtime/dynamic_batcher.h"
#include "gtest/gtest.h"
#include "server/proto_convert.h"
#include "tests/test_util/device_setup.h"
#include "tests/test_util/random_graph.h"
#include "tests/test_util/random_tensor.h"

namespace convserve {
namespace {

constexpr absl::Duration kWait = absl::Minutes(5);  // cold engine searches

double Bound(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 1e-3;  // TF32 allowed, as by default
    case DType::kFloat16:
      return 1e-2;
    case DType::kBFloat16:
      return 2e-2;
  }
  return 0;
}

double RelativeError(DType dtype, const std::string& actual, const std::string& expected) {
  const size_t count = expected.size() / DTypeSize(dtype);
  if (actual.size() != expected.size()) return INFINITY;
  std::vector<float> a(count), e(count);
  ToFloat(dtype, actual.data(), a.data(), count);
  ToFloat(dtype, expected.data(), e.data(), count);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < count; ++i) {
    diff += (double(a[i]) - e[i]) * (double(a[i]) - e[i]);
    norm += double(e[i]) * e[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Where a call's input and output live.
enum class Memory { kMessage, kPinnedHost, kDevice };

// One call and what it got back.
struct Request {
  Memory memory = Memory::kMessage;
  Shape shape;
  std::string input;
  std::string output;  // the message output, or a copy of the memory's
  TensorMemory pinned_in, pinned_out;
  void* device_in = nullptr;
  void* device_out = nullptr;
  absl::Notification done;
  absl::Status status;
  InferTimings timings;

  ~Request() {
    if (device_in != nullptr) cudaFree(device_in);
    if (device_out != nullptr) cudaFree(device_out);
  }
};

InferCall MakeCall(DevicePool& pool, const std::shared_ptr<const Graph>& graph, Request* r) {
  InferCall call;
  call.graph = graph;
  call.input_shape = r->shape;
  call.layer_outputs = *graph->InferShapes(r->shape);
  const size_t out_bytes = NumElements(call.layer_outputs.back()) * DTypeSize(graph->spec().dtype);
  call.input = absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(r->input.data()),
                                   r->input.size());
  switch (r->memory) {
    case Memory::kMessage:
      call.output = &r->output;
      break;
    case Memory::kPinnedHost: {
      r->pinned_in = *pool.AllocateHostBuffer(r->input.size());
      std::memcpy(r->pinned_in.data, r->input.data(), r->input.size());
      call.input = absl::MakeConstSpan(r->pinned_in.data, r->input.size());
      call.input_memory = r->pinned_in;
      r->pinned_out = *pool.AllocateHostBuffer(out_bytes);
      call.output_memory = r->pinned_out;
      break;
    }
    case Memory::kDevice: {
      cudaSetDevice(0);
      EXPECT_EQ(cudaMalloc(&r->device_in, r->input.size()), cudaSuccess);
      EXPECT_EQ(cudaMalloc(&r->device_out, out_bytes), cudaSuccess);
      EXPECT_EQ(CopyToDevice(r->device_in, r->input.data(), r->input.size()), cudaSuccess);
      TensorMemory in;
      in.kind = TensorMemory::Kind::kDevice;
      in.data = static_cast<uint8_t*>(r->device_in);
      in.bytes = r->input.size();
      in.device = 0;
      call.input = {};
      call.input_memory = in;
      TensorMemory out = in;
      out.data = static_cast<uint8_t*>(r->device_out);
      out.bytes = out_bytes;
      call.output_memory = out;
      break;
    }
  }
  call.done = [r, out_bytes](const absl::Status& status, const Shape&, const InferTimings& t) {
    r->status = status;
    r->timings = t;
    if (status.ok() && r->memory == Memory::kPinnedHost) {
      r->output.assign(reinterpret_cast<const char*>(r->pinned_out.data), out_bytes);
    } else if (status.ok() && r->memory == Memory::kDevice) {
      r->output.resize(out_bytes);
      cudaSetDevice(0);
      cudaMemcpy(r->output.data(), r->device_out, out_bytes, cudaMemcpyDeviceToHost);
    }
    r->done.Notify();
  };
  return call;
}

std::string CpuOutput(Backend& cpu, const std::shared_ptr<const Graph>& graph, const Request& r) {
  auto executable = cpu.Compile(graph, r.shape);
  EXPECT_TRUE(executable.ok()) << executable.status();
  std::string out(NumElements((*executable)->output_shape()) * DTypeSize(graph->spec().dtype),
                  '\0');
  EXPECT_TRUE((*executable)
                  ->Run(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(r.input.data()),
                                            r.input.size()),
                        absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), out.size()))
                  .ok());
  return out;
}

class DynamicBatchingGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    DevicePoolOptions options;
    options.devices = {0};
    options.selection.search = EngineSearch::kHeuristicInstant;
    absl::StatusOr<std::unique_ptr<DevicePool>> pool = DevicePool::Create(options);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
    pool_->set_execution_observer([this](const ExecutionEvent& e) {
      absl::MutexLock lock(&mu_);
      executions_.push_back(e);
    });
    cpu_ = *CpuBackend::Create({});
  }

  std::shared_ptr<const Graph> Load(const v1::GraphDef& def) {
    v1::GraphDef copy = def;
    auto graph = *Graph::Create(*GraphSpecFromProto(&copy));
    EXPECT_TRUE(pool_->AddGraph(graph).ok());
    return graph;
  }

  std::vector<ExecutionEvent> executions() {
    absl::MutexLock lock(&mu_);
    return executions_;
  }

  std::unique_ptr<DevicePool> pool_;
  std::unique_ptr<Backend> cpu_;
  absl::Mutex mu_;
  std::vector<ExecutionEvent> executions_ ABSL_GUARDED_BY(mu_);
};

TEST_F(DynamicBatchingGpuTest, BatchesOfRandomGraphsSplitBackCorrectly) {
  RandomGraphOptions options;
  options.max_batch = 3;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    const RandomGraphCase graph_case = MakeRandomGraph(seed, options);
    auto graph = Load(graph_case.graph);
    const DType dtype = graph->spec().dtype;
    std::mt19937_64 rng(seed);
    const int count = 2 + static_cast<int>(rng() % 4);
    std::vector<std::unique_ptr<Request>> requests;
    InferBatch batch;
    int64_t total = 0;
    for (int i = 0; i < count; ++i) {
      auto r = std::make_unique<Request>();
      r->memory = static_cast<Memory>((seed + i) % 3);
      r->shape.assign(graph_case.input_shape.begin(), graph_case.input_shape.end());
      r->shape[0] = 1 + static_cast<int64_t>(rng() % 3);
      total += r->shape[0];
      r->input = RandomTensor(dtype, NumElements(r->shape), 1.0f, &rng);
      batch.calls.push_back(MakeCall(*pool_, graph, r.get()));
      batch.delays.push_back(0);
      requests.push_back(std::move(r));
    }
    pool_->SubmitBatch(std::move(batch));
    for (auto& r : requests) {
      ASSERT_TRUE(r->done.WaitForNotificationWithTimeout(kWait));
      ASSERT_TRUE(r->status.ok()) << graph_case.description << ": " << r->status;
      EXPECT_EQ(r->timings.batch_size, total);
      const double error = RelativeError(dtype, r->output, CpuOutput(*cpu_, graph, *r));
      EXPECT_LE(error, Bound(dtype)) << graph_case.description << " memory "
                                     << static_cast<int>(r->memory) << " N " << r->shape[0];
    }
    EXPECT_EQ(executions().back().batch_size, total) << graph_case.description;
    pool_->RemoveGraph(graph->id());
  }
}

TEST_F(DynamicBatchingGpuTest, OneCallsFailedCopyOrCancellationSparesItsBatchMates) {
  const RandomGraphCase graph_case = MakeRandomGraph(99);
  auto graph = Load(graph_case.graph);
  const DType dtype = graph->spec().dtype;
  std::mt19937_64 rng(99);
  std::vector<std::unique_ptr<Request>> requests;
  InferBatch batch;
  for (int i = 0; i < 5; ++i) {
    auto r = std::make_unique<Request>();
    r->memory = i == 2 ? Memory::kDevice : Memory::kMessage;
    r->shape.assign(graph_case.input_shape.begin(), graph_case.input_shape.end());
    r->shape[0] = 1;
    r->input = RandomTensor(dtype, NumElements(r->shape), 1.0f, &rng);
    batch.calls.push_back(MakeCall(*pool_, graph, r.get()));
    batch.delays.push_back(0);
    requests.push_back(std::move(r));
  }
  // Its input claims a device no CUDA call accepts: its copy fails alone.
  batch.calls[2].input_memory->device = 1 << 20;
  batch.calls[4].cancelled = [] { return true; };
  pool_->SubmitBatch(std::move(batch));
  for (auto& r : requests) ASSERT_TRUE(r->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(requests[2]->status.code(), absl::StatusCode::kInternal) << requests[2]->status;
  EXPECT_EQ(requests[4]->status.code(), absl::StatusCode::kCancelled) << requests[4]->status;
  for (int i : {0, 1, 3}) {
    ASSERT_TRUE(requests[i]->status.ok()) << requests[i]->status;
    EXPECT_LE(RelativeError(dtype, requests[i]->output, CpuOutput(*cpu_, graph, *requests[i])),
              Bound(dtype));
  }
  EXPECT_TRUE(pool_->healthy());
}

TEST_F(DynamicBatchingGpuTest, BatcherJoinsConcurrentCallsOnTheGpu) {
  const RandomGraphCase graph_case = MakeRandomGraph(7);
  auto graph = Load(graph_case.graph);
  const DType dtype = graph->spec().dtype;
  DynamicBatchingOptions options;
  options.max_batch_size = 32;
  options.max_queue_delay = absl::Milliseconds(2);
  auto batcher = *DynamicBatcher::Create(options, pool_.get(), graph->name());
  std::mt19937_64 rng(7);
  std::vector<std::unique_ptr<Request>> requests;
  for (int i = 0; i < 64; ++i) {
    auto r = std::make_unique<Request>();
    r->memory = static_cast<Memory>(i % 3);
    r->shape.assign(graph_case.input_shape.begin(), graph_case.input_shape.end());
    r->shape[0] = 1;
    r->input = RandomTensor(dtype, NumElements(r->shape), 1.0f, &rng);
    requests.push_back(std::move(r));
  }
  for (auto& r : requests) batcher->Submit(MakeCall(*pool_, graph, r.get()));
  int64_t largest = 0;
  for (auto& r : requests) {
    ASSERT_TRUE(r->done.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(r->status.ok()) << r->status;
    largest = std::max(largest, r->timings.batch_size);
    EXPECT_LE(RelativeError(dtype, r->output, CpuOutput(*cpu_, graph, *r)), Bound(dtype));
  }
  EXPECT_GT(largest, 1);
  int64_t inferences = 0;
  for (const ExecutionEvent& e : executions()) inferences += e.succeeded_batch;
  EXPECT_EQ(inferences, 64);
  EXPECT_LT(executions().size(), 64u);
}

}  // namespace
}  // namespace convserve
