// DynamicBatcher in front of the CPU BackendRunner: waiting requests are
// joined into one execution (counted by the runner's execution events),
// outputs split back byte-identical to running alone, one request's failure
// isolated, max_queue_delay, preferred and max batch sizes honoured, waiting
// only while a batch runs (dispatch_when_idle) or Triton's way, mixed shapes
// kept apart, cancelled requests answered while queued, Close hands
// everything on. Requests are made to wait with a gate on the backend's runs
// (a blocker request holds the only worker), never with sleeps.
#include "engine/runtime/dynamic_batcher.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/runtime/backend_runner.h"
#include "gtest/gtest.h"
#include "server/proto_convert.h"
#include "tests/test_util/gated_backend.h"
#include "tests/test_util/random_graph.h"
#include "tests/test_util/random_tensor.h"

namespace convserve {
namespace {

constexpr absl::Duration kWait = absl::Seconds(20);

std::shared_ptr<const Graph> MakeGraph(const v1::GraphDef& def) {
  v1::GraphDef copy = def;
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&copy);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(*std::move(spec));
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *graph;
}

// Two layers, NHWC float32: 3 -> 5 channels 3x3 (pad 1, relu), 5 -> 4 1x1.
std::shared_ptr<const Graph> SmallGraph() {
  v1::GraphDef def;
  def.set_name("small");
  def.set_data_type(v1::FLOAT32);
  def.set_layout(v1::NHWC);
  def.set_input_channels(3);
  v1::ConvLayer* first = def.add_layers();
  first->set_out_channels(5);
  first->add_kernel_size(3);
  first->add_kernel_size(3);
  first->add_pad_before(1);
  first->add_pad_before(1);
  first->add_pad_after(1);
  first->add_pad_after(1);
  first->mutable_activation()->set_kind(v1::Activation::RELU);
  v1::ConvLayer* second = def.add_layers();
  second->set_out_channels(4);
  second->add_kernel_size(1);
  second->add_kernel_size(1);
  absl::StatusOr<RandomGraphCase> filled = MakeGraphCase(def, {1, 3, 5, 7}, 7, true);
  EXPECT_TRUE(filled.ok()) << filled.status();
  return MakeGraph(filled->graph);
}

// What one request got back.
struct Outcome {
  absl::Notification done;
  absl::Status status;
  Shape shape;
  InferTimings timings;
  std::string output;
  std::string input;
  absl::Time answered;
};

// A CPU runner (one worker unless said) whose runs wait at `gate` while it
// is closed, recording every execution.
class Harness {
 public:
  explicit Harness(int threads = 1, bool gated = true) {
    CpuBackendOptions cpu;
    cpu.threads = 1;
    auto backend = CpuBackend::Create(cpu);
    EXPECT_TRUE(backend.ok());
    reference_ = *std::move(backend);
    GatedBackendOptions options;
    if (gated) options.run = gate_;
    RequestExecutorOptions executor;
    executor.threads = threads;
    runner_ = std::make_unique<BackendRunner>(GatedBackend::AroundCpu(options), executor);
    runner_->set_execution_observer([this](const ExecutionEvent& event) {
      absl::MutexLock lock(&mu_);
      executions_.push_back(event);
    });
  }
  // A test that failed with runs still held lets them finish, so the runner
  // can stop.
  ~Harness() { gate_->Open(); }

  // `when_idle`: dispatch_when_idle (the default); false for Triton's rule.
  std::unique_ptr<DynamicBatcher> Batcher(int64_t max_batch_size,
                                          absl::Duration delay = absl::ZeroDuration(),
                                          std::vector<int64_t> preferred = {},
                                          int max_queued = 256, bool when_idle = true) {
    DynamicBatchingOptions options;
    options.max_batch_size = max_batch_size;
    options.max_queue_delay = delay;
    options.preferred_batch_sizes = std::move(preferred);
    options.max_queued = max_queued;
    options.dispatch_when_idle = when_idle;
    absl::StatusOr<std::unique_ptr<DynamicBatcher>> batcher =
        DynamicBatcher::Create(options, runner_.get(), "small");
    EXPECT_TRUE(batcher.ok()) << batcher.status();
    return *std::move(batcher);
  }

  // A call of `graph` on `shape` with fresh random input from `seed`,
  // answered into `outcome`.
  InferCall Call(const std::shared_ptr<const Graph>& graph, const Shape& shape, uint64_t seed,
                 Outcome* outcome) {
    std::mt19937_64 rng(seed);
    outcome->input = RandomTensor(graph->spec().dtype, NumElements(shape), 1.0f, &rng);
    InferCall call;
    call.graph = graph;
    call.input_shape = shape;
    absl::StatusOr<std::vector<Shape>> outputs = graph->InferShapes(shape);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    call.layer_outputs = *outputs;
    call.input = absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(outcome->input.data()),
                                     outcome->input.size());
    call.output = &outcome->output;
    call.done = [outcome](const absl::Status& status, const Shape& shape,
                          const InferTimings& timings) {
      outcome->status = status;
      outcome->shape = shape;
      outcome->timings = timings;
      outcome->answered = absl::Now();
      outcome->done.Notify();
    };
    return call;
  }

  // The output of running `outcome`'s input alone on the CPU backend.
  std::string Alone(const std::shared_ptr<const Graph>& graph, const Shape& shape,
                    const Outcome& outcome) {
    auto executable = reference_->Compile(graph, shape);
    EXPECT_TRUE(executable.ok()) << executable.status();
    std::string output(
        NumElements((*executable)->output_shape()) * DTypeSize(graph->spec().dtype), '\0');
    absl::Status run = (*executable)->Run(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(outcome.input.data()),
                            outcome.input.size()),
        absl::MakeSpan(reinterpret_cast<uint8_t*>(output.data()), output.size()));
    EXPECT_TRUE(run.ok()) << run;
    return output;
  }

  std::vector<ExecutionEvent> executions() const {
    absl::MutexLock lock(&mu_);
    return executions_;
  }
  std::vector<int64_t> batch_sizes() const {
    std::vector<int64_t> sizes;
    for (const ExecutionEvent& e : executions()) sizes.push_back(e.batch_size);
    return sizes;
  }

  BackendGate& gate() { return *gate_; }
  BackendRunner* runner() { return runner_.get(); }

 private:
  std::shared_ptr<BackendGate> gate_ = std::make_shared<BackendGate>();
  std::unique_ptr<Backend> reference_;
  mutable absl::Mutex mu_;
  std::vector<ExecutionEvent> executions_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<BackendRunner> runner_;
};

// Polls `batcher` until `count` requests wait in it (bounded).
bool AwaitQueued(const DynamicBatcher& batcher, int count) {
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::Now() < deadline) {
    if (batcher.queued() == count) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

TEST(DynamicBatcherTest, JoinsWaitingRequestsIntoOneExecution) {
  Harness harness;
  auto graph = SmallGraph();
  auto batcher = harness.Batcher(8);
  std::vector<Outcome> outcomes(7);
  batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 100, &outcomes[0]));
  ASSERT_TRUE(harness.gate().AwaitHeld(1, kWait));  // the blocker holds the worker
  for (int i = 1; i < 7; ++i) batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 100 + i, &outcomes[i]));
  ASSERT_TRUE(AwaitQueued(*batcher, 6));
  harness.gate().Open();
  for (Outcome& o : outcomes) ASSERT_TRUE(o.done.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(harness.batch_sizes(), (std::vector<int64_t>{1, 6}));
  const std::vector<ExecutionEvent> executions = harness.executions();
  EXPECT_TRUE(executions[1].batched);
  EXPECT_EQ(executions[1].requests, 6);
  EXPECT_EQ(executions[1].succeeded_batch, 6);
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(outcomes[i].status.ok()) << i << ": " << outcomes[i].status;
    EXPECT_EQ(outcomes[i].shape, (Shape{1, 4, 5, 7}));
    EXPECT_EQ(outcomes[i].timings.batch_size, i == 0 ? 1 : 6);
    EXPECT_EQ(outcomes[i].output, harness.Alone(graph, {1, 3, 5, 7}, outcomes[i])) << i;
  }
}

// Seeded random graphs (every dtype and layout, odd sizes): requests of
// random N joined in one execution give each exactly the bytes it gets alone.
TEST(DynamicBatcherTest, SplitOutputsAreByteIdenticalToRunningAlone) {
  Harness harness(1, false);
  RandomGraphOptions options;
  options.max_batch = 3;
  options.max_macs = 400'000;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const RandomGraphCase graph_case = MakeRandomGraph(seed, options);
    auto graph = MakeGraph(graph_case.graph);
    std::mt19937_64 rng(seed);
    const int requests = 2 + static_cast<int>(rng() % 4);
    std::vector<Outcome> outcomes(requests);
    std::vector<Shape> shapes;
    InferBatch batch;
    for (int i = 0; i < requests; ++i) {
      Shape shape(graph_case.input_shape.begin(), graph_case.input_shape.end());
      shape[0] = 1 + static_cast<int64_t>(rng() % 3);
      shapes.push_back(shape);
      batch.calls.push_back(harness.Call(graph, shape, seed * 100 + i, &outcomes[i]));
      batch.delays.push_back(0);
    }
    harness.runner()->SubmitBatch(std::move(batch));
    int64_t total = 0;
    for (int i = 0; i < requests; ++i) {
      ASSERT_TRUE(outcomes[i].done.WaitForNotificationWithTimeout(kWait));
      ASSERT_TRUE(outcomes[i].status.ok()) << graph_case.description << ": " << outcomes[i].status;
      EXPECT_EQ(outcomes[i].output, harness.Alone(graph, shapes[i], outcomes[i]))
          << graph_case.description << " request " << i << " N " << shapes[i][0];
      total += shapes[i][0];
    }
    ASSERT_FALSE(harness.executions().empty());
    EXPECT_EQ(harness.executions().back().batch_size, total) << graph_case.description;
    EXPECT_EQ(harness.executions().back().requests, requests);
  }
}

TEST(DynamicBatcherTest, OneFailingRequestDoesNotFailItsBatchMates) {
  Harness harness(1, false);
  auto graph = SmallGraph();
  std::vector<Outcome> outcomes(5);
  InferBatch batch;
  for (int i = 0; i < 5; ++i) {
    batch.calls.push_back(harness.Call(graph, {1 + i % 2, 3, 5, 7}, 300 + i, &outcomes[i]));
    batch.delays.push_back(0);
  }
  batch.calls[1].cancelled = [] { return true; };  // its client went away
  std::string small_region(8, '\0');                 // its output region is too small
  TensorMemory region;
  region.data = reinterpret_cast<uint8_t*>(small_region.data());
  region.bytes = small_region.size();
  region.shared_region = true;
  batch.calls[3].output = nullptr;
  batch.calls[3].output_memory = region;
  harness.runner()->SubmitBatch(std::move(batch));
  for (Outcome& o : outcomes) ASSERT_TRUE(o.done.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(outcomes[1].status.code(), absl::StatusCode::kCancelled) << outcomes[1].status;
  EXPECT_EQ(outcomes[3].status.code(), absl::StatusCode::kInternal) << outcomes[3].status;
  for (int i : {0, 2, 4}) {
    ASSERT_TRUE(outcomes[i].status.ok()) << i << ": " << outcomes[i].status;
    EXPECT_EQ(outcomes[i].output, harness.Alone(graph, {1 + i % 2, 3, 5, 7}, outcomes[i])) << i;
  }
  ASSERT_EQ(harness.executions().size(), 1u);
  EXPECT_EQ(harness.executions()[0].requests, 3);
  EXPECT_EQ(harness.executions()[0].batch_size, 1 + 1 + 1);
}

// A backend that cannot run N > 1 (as when a larger batch finds no plan or
// no memory): the joined run fails, and each request runs alone.
class SingleSampleBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string Describe() const override { return "single-sample CPU"; }
  absl::StatusOr<std::shared_ptr<Executable>> Compile(std::shared_ptr<const Graph> graph,
                                                      const Shape& input_shape) override {
    if (input_shape[0] > 1) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no room for N=", input_shape[0], " in this test backend"));
    }
    return inner_->Compile(std::move(graph), input_shape);
  }

 private:
  std::unique_ptr<Backend> inner_ = *CpuBackend::Create({});
};

TEST(DynamicBatcherTest, FailedJoinedRunRunsEachRequestAlone) {
  Harness reference(1, false);
  BackendRunner runner(std::make_unique<SingleSampleBackend>(), RequestExecutorOptions{});
  std::vector<int64_t> sizes;
  absl::Mutex mu;
  runner.set_execution_observer([&](const ExecutionEvent& e) {
    absl::MutexLock lock(&mu);
    sizes.push_back(e.batch_size);
  });
  auto graph = SmallGraph();
  std::vector<Outcome> outcomes(3);
  InferBatch batch;
  for (int i = 0; i < 3; ++i) {
    batch.calls.push_back(reference.Call(graph, {1, 3, 5, 7}, 400 + i, &outcomes[i]));
    batch.delays.push_back(0);
  }
  runner.SubmitBatch(std::move(batch));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(outcomes[i].done.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(outcomes[i].status.ok()) << outcomes[i].status;
    EXPECT_EQ(outcomes[i].output, reference.Alone(graph, {1, 3, 5, 7}, outcomes[i]));
    EXPECT_EQ(outcomes[i].timings.batch_size, 1);
  }
  absl::MutexLock lock(&mu);
  EXPECT_EQ(sizes, (std::vector<int64_t>{1, 1, 1}));
}

// Triton's rule (dispatch_when_idle off): a lone request waits the delay out.
TEST(DynamicBatcherTest, WaitsMaxQueueDelayForBatchMates) {
  Harness harness(2, false);
  auto graph = SmallGraph();
  constexpr absl::Duration kDelay = absl::Milliseconds(150);
  auto batcher = harness.Batcher(4, kDelay, {}, 256, /*when_idle=*/false);
  Outcome alone;
  const absl::Time sent = absl::Now();
  batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 500, &alone));
  ASSERT_TRUE(alone.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(alone.status.ok()) << alone.status;
  EXPECT_GE(alone.answered - sent, kDelay);
  EXPECT_LT(alone.answered - sent, kDelay + absl::Seconds(2));
  EXPECT_GE(alone.timings.batch_delay, absl::ToDoubleSeconds(kDelay) * 0.99);
}

TEST(DynamicBatcherTest, FullBatchDoesNotWaitForTheDelay) {
  Harness harness(2, false);
  auto graph = SmallGraph();
  auto batcher = harness.Batcher(4, absl::Seconds(60), {}, 256, /*when_idle=*/false);
  std::vector<Outcome> outcomes(4);
  for (int i = 0; i < 4; ++i) batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 600 + i, &outcomes[i]));
  // With 60 s of delay, only a full batch is answered within the bound.
  for (Outcome& o : outcomes) {
    ASSERT_TRUE(o.done.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(o.status.ok()) << o.status;
  }
  EXPECT_EQ(harness.batch_sizes(), (std::vector<int64_t>{4}));
}

// The default: with nothing of the graph in flight, a lone request goes at
// once, however long the delay (60 s here, beyond the test's wait).
TEST(DynamicBatcherTest, IdleRunnerTakesWhatWaitsAtOnce) {
  Harness harness(2, false);
  auto graph = SmallGraph();
  auto batcher = harness.Batcher(4, absl::Seconds(60));
  Outcome alone;
  batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 550, &alone));
  ASSERT_TRUE(alone.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(alone.status.ok()) << alone.status;
  EXPECT_LT(alone.timings.batch_delay, absl::ToDoubleSeconds(kWait));
  EXPECT_EQ(harness.batch_sizes(), (std::vector<int64_t>{1}));
}

// The default, while a batch runs: later requests wait for batch-mates even
// with a worker free, and go together the moment the running batch ends
// (long before the 60 s delay).
TEST(DynamicBatcherTest, WaitsForBatchMatesOnlyWhileABatchRuns) {
  Harness harness(2);
  auto graph = SmallGraph();
  auto batcher = harness.Batcher(8, absl::Seconds(60));
  std::vector<Outcome> outcomes(4);
  batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 560, &outcomes[0]));
  ASSERT_TRUE(harness.gate().AwaitHeld(1, kWait));  // running, held at the gate
  for (int i = 1; i < 4; ++i) batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 560 + i, &outcomes[i]));
  ASSERT_TRUE(AwaitQueued(*batcher, 3));
  // The second worker is free, yet nothing more reaches the backend.
  EXPECT_FALSE(harness.gate().AwaitHeld(2, absl::Milliseconds(200)));
  EXPECT_EQ(batcher->queued(), 3);
  harness.gate().Open();
  for (Outcome& o : outcomes) {
    ASSERT_TRUE(o.done.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(o.status.ok()) << o.status;
  }
  EXPECT_EQ(harness.batch_sizes(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(outcomes[3].timings.batch_size, 3);
}

TEST(DynamicBatcherTest, CutsAtTheLargestReachablePreferredSize) {
  Harness harness(1);
  auto graph = SmallGraph();
  auto batcher = harness.Batcher(8, absl::Seconds(60), {2, 4}, 256, /*when_idle=*/false);
  std::vector<Outcome> outcomes(8);
  // The blocker waits its delay unless a preferred size forms: 1 + 1 = 2.
  batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 700, &outcomes[0]));
  batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 701, &outcomes[1]));
  ASSERT_TRUE(harness.gate().AwaitHeld(1, kWait));
  for (int i = 2; i < 8; ++i) batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 700 + i, &outcomes[i]));
  ASSERT_TRUE(AwaitQueued(*batcher, 6));
  harness.gate().Open();
  // 6 waiting: cut at 4 (not 6, which is not preferred); the 2 left are
  // preferred again.
  for (Outcome& o : outcomes) {
    ASSERT_TRUE(o.done.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(o.status.ok()) << o.status;
  }
  EXPECT_EQ(harness.batch_sizes(), (std::vector<int64_t>{2, 4, 2}));
}

TEST(DynamicBatcherTest, RespectsMaxBatchSize) {
  Harness harness(1);
  auto graph = SmallGraph();
  auto batcher = harness.Batcher(4);
  std::vector<Outcome> outcomes(12);
  batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 800, &outcomes[0]));
  ASSERT_TRUE(harness.gate().AwaitHeld(1, kWait));
  // N: 1 x 8, then 3 (does not fit after 1), then 6 (larger than the
  // maximum: alone), then 1 x 2.
  std::vector<int64_t> n = {1, 1, 1, 1, 1, 1, 1, 1, 3, 6, 1};
  for (size_t i = 0; i < n.size(); ++i) {
    batcher->Submit(harness.Call(graph, {n[i], 3, 5, 7}, 801 + i, &outcomes[i + 1]));
  }
  ASSERT_TRUE(AwaitQueued(*batcher, static_cast<int>(n.size())));
  harness.gate().Open();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_TRUE(outcomes[i].done.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(outcomes[i].status.ok()) << outcomes[i].status;
    const Shape shape = {i == 0 ? 1 : n[i - 1], 3, 5, 7};
    EXPECT_EQ(outcomes[i].output, harness.Alone(graph, shape, outcomes[i])) << i;
  }
  EXPECT_EQ(harness.batch_sizes(), (std::vector<int64_t>{1, 4, 4, 3, 6, 1}));
}

TEST(DynamicBatcherTest, DoesNotJoinDifferentShapes) {
  Harness harness(1);
  auto graph = SmallGraph();
  auto batcher = harness.Batcher(16);
  std::vector<Outcome> outcomes(9);
  std::vector<Shape> shapes = {{1, 3, 5, 7}};
  batcher->Submit(harness.Call(graph, shapes[0], 900, &outcomes[0]));
  ASSERT_TRUE(harness.gate().AwaitHeld(1, kWait));
  for (int i = 1; i < 9; ++i) {
    shapes.push_back(i % 2 == 0 ? Shape{1, 3, 5, 7} : Shape{1, 3, 6, 7});
    batcher->Submit(harness.Call(graph, shapes[i], 900 + i, &outcomes[i]));
  }
  ASSERT_TRUE(AwaitQueued(*batcher, 8));
  harness.gate().Open();
  for (int i = 0; i < 9; ++i) {
    ASSERT_TRUE(outcomes[i].done.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(outcomes[i].status.ok()) << outcomes[i].status;
    EXPECT_EQ(outcomes[i].output, harness.Alone(graph, shapes[i], outcomes[i])) << i;
  }
  // The oldest waiting (H 6) goes first with its kind; then the H 5 ones.
  EXPECT_EQ(harness.batch_sizes(), (std::vector<int64_t>{1, 4, 4}));
  EXPECT_EQ(outcomes[1].timings.batch_size, 4);
  EXPECT_EQ(outcomes[2].timings.batch_size, 4);
}

TEST(DynamicBatcherTest, AnswersRequestsCancelledWhileTheyWait) {
  Harness harness(1);
  auto graph = SmallGraph();
  auto batcher = harness.Batcher(8);
  std::vector<Outcome> outcomes(3);
  batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 1000, &outcomes[0]));
  ASSERT_TRUE(harness.gate().AwaitHeld(1, kWait));
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  InferCall doomed = harness.Call(graph, {1, 3, 5, 7}, 1001, &outcomes[1]);
  doomed.cancelled = [cancelled] { return cancelled->load(); };
  batcher->Submit(std::move(doomed));
  batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 1002, &outcomes[2]));
  ASSERT_TRUE(AwaitQueued(*batcher, 2));
  cancelled->store(true);
  // Answered while the worker is still held: not when its turn comes.
  ASSERT_TRUE(outcomes[1].done.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(outcomes[1].status.code(), absl::StatusCode::kCancelled) << outcomes[1].status;
  EXPECT_EQ(harness.gate().passed(), 0);
  harness.gate().Open();
  for (int i : {0, 2}) {
    ASSERT_TRUE(outcomes[i].done.WaitForNotificationWithTimeout(kWait));
    EXPECT_TRUE(outcomes[i].status.ok()) << outcomes[i].status;
  }
  EXPECT_EQ(harness.batch_sizes(), (std::vector<int64_t>{1, 1}));
}

TEST(DynamicBatcherTest, CloseHandsWaitingRequestsToTheRunner) {
  Harness harness(2, false);
  auto graph = SmallGraph();
  auto batcher = harness.Batcher(8, absl::Seconds(60), {}, 256, /*when_idle=*/false);
  std::vector<Outcome> outcomes(4);
  for (int i = 0; i < 3; ++i) batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 1100 + i, &outcomes[i]));
  ASSERT_TRUE(AwaitQueued(*batcher, 3));
  batcher->Close();
  // After Close a request goes to the runner alone.
  batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 1103, &outcomes[3]));
  for (Outcome& o : outcomes) {
    ASSERT_TRUE(o.done.WaitForNotificationWithTimeout(kWait));
    EXPECT_TRUE(o.status.ok()) << o.status;
  }
  std::vector<int64_t> sizes = harness.batch_sizes();  // two workers: either may end first
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<int64_t>{1, 3}));
}

TEST(DynamicBatcherTest, FullQueueRefusesAtOnce) {
  Harness harness(1);
  auto graph = SmallGraph();
  auto batcher = harness.Batcher(8, absl::ZeroDuration(), {}, 2);
  std::vector<Outcome> outcomes(4);
  batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 1200, &outcomes[0]));
  ASSERT_TRUE(harness.gate().AwaitHeld(1, kWait));
  for (int i = 1; i < 4; ++i) batcher->Submit(harness.Call(graph, {1, 3, 5, 7}, 1200 + i, &outcomes[i]));
  ASSERT_TRUE(outcomes[3].done.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(outcomes[3].status.code(), absl::StatusCode::kResourceExhausted) << outcomes[3].status;
  harness.gate().Open();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(outcomes[i].done.WaitForNotificationWithTimeout(kWait));
    EXPECT_TRUE(outcomes[i].status.ok()) << outcomes[i].status;
  }
}

TEST(DynamicBatcherTest, RejectsBadSettings) {
  EXPECT_EQ(ValidateDynamicBatching({-1}).code(), absl::StatusCode::kInvalidArgument);
  DynamicBatchingOptions preferred;
  preferred.max_batch_size = 8;
  preferred.preferred_batch_sizes = {4, 16};
  EXPECT_EQ(ValidateDynamicBatching(preferred).code(), absl::StatusCode::kInvalidArgument);
  DynamicBatchingOptions delay;
  delay.max_batch_size = 8;
  delay.max_queue_delay = absl::Microseconds(-5);
  EXPECT_EQ(ValidateDynamicBatching(delay).code(), absl::StatusCode::kInvalidArgument);
  DynamicBatchingOptions off;
  EXPECT_TRUE(ValidateDynamicBatching(off).ok());
}

}  // namespace
}  // namespace convserve
