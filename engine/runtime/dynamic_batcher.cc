#include "engine/runtime/dynamic_batcher.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "engine/thread_name.h"

namespace convserve {
namespace {

// While requests wait, the batcher wakes at least this often to answer the
// ones whose client cancelled or whose deadline passed.
constexpr absl::Duration kCancelSweep = absl::Milliseconds(5);

struct Queued {
  InferCall call;
  absl::Time enqueued;
};

// Inputs that can be joined along N: the same dims but N.
bool SameBatchKey(const Shape& a, const Shape& b) {
  return a.size() == b.size() && std::equal(a.begin() + 1, a.end(), b.begin() + 1);
}

bool IsCancelled(const InferCall& call) { return call.cancelled && call.cancelled(); }

}  // namespace

struct DynamicBatcher::State {
  mutable absl::Mutex mu;
  std::deque<Queued> queue ABSL_GUARDED_BY(mu);
  // Batches handed to the runner whose calls are not all answered.
  int inflight ABSL_GUARDED_BY(mu) = 0;
  // Bumped by every Submit: a waiting loop re-forms its batch.
  int64_t arrivals ABSL_GUARDED_BY(mu) = 0;
  // Close() was called: dispatch everything, then the thread exits.
  bool closed ABSL_GUARDED_BY(mu) = false;
};

absl::Status ValidateDynamicBatching(const DynamicBatchingOptions& options) {
  if (options.max_batch_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size must be >= 0 (0 turns batching off), got ",
                     options.max_batch_size));
  }
  if (options.max_queue_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_delay_microseconds must be >= 0, got ",
                     absl::ToInt64Microseconds(options.max_queue_delay)));
  }
  for (int64_t size : options.preferred_batch_sizes) {
    if (size < 1 || size > options.max_batch_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "preferred_batch_size ", size, " is outside 1..max_batch_size (",
          options.max_batch_size, "); preferred sizes given: ",
          absl::StrJoin(options.preferred_batch_sizes, ",")));
    }
  }
  if (options.max_queued < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the batching queue must hold >= 1 request, got ", options.max_queued));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DynamicBatcher>> DynamicBatcher::Create(
    const DynamicBatchingOptions& options, RequestRunner* runner, std::string graph_name) {
  if (runner == nullptr) return absl::InvalidArgumentError("a dynamic batcher needs a runner");
  absl::Status valid = ValidateDynamicBatching(options);
  if (!valid.ok()) return valid;
  if (options.max_batch_size == 0) {
    return absl::InvalidArgumentError("a dynamic batcher needs max_batch_size >= 1");
  }
  DynamicBatchingOptions sorted = options;  // FormBatch searches the preferred sizes
  std::sort(sorted.preferred_batch_sizes.begin(), sorted.preferred_batch_sizes.end());
  std::unique_ptr<DynamicBatcher> batcher(
      new DynamicBatcher(sorted, runner, std::move(graph_name)));
  batcher->thread_ = std::thread([b = batcher.get()] {
    NameThisThread("cs-batcher");
    b->Loop();
  });
  return batcher;
}

DynamicBatcher::DynamicBatcher(const DynamicBatchingOptions& options, RequestRunner* runner,
                               std::string graph_name)
    : options_(options),
      runner_(runner),
      graph_name_(std::move(graph_name)),
      state_(std::make_shared<State>()) {}

DynamicBatcher::~DynamicBatcher() { Close(); }

void DynamicBatcher::Close() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->closed = true;
  }
  if (thread_.joinable()) thread_.join();
}

int DynamicBatcher::queued() const {
  absl::MutexLock lock(&state_->mu);
  return static_cast<int>(state_->queue.size());
}

void DynamicBatcher::Submit(InferCall call) {
  bool full = false;
  {
    absl::MutexLock lock(&state_->mu);
    if (!state_->closed) {
      full = static_cast<int>(state_->queue.size()) >= options_.max_queued;
      if (!full) {
        state_->queue.push_back(Queued{std::move(call), absl::Now()});
        ++state_->arrivals;
        return;
      }
    }
  }
  if (full) {
    call.done(absl::ResourceExhaustedError(absl::StrCat(
                  "graph '", graph_name_, "' has ", options_.max_queued,
                  " requests waiting to be batched (--max_queued_requests); retry later")),
              {}, {});
    return;
  }
  // Closed (the graph is being unloaded or the server drains): the runner
  // decides, as for a graph without batching.
  InferBatch alone;
  alone.calls.push_back(std::move(call));
  alone.delays.push_back(0);
  runner_->SubmitBatch(std::move(alone));
}

namespace {

// The batch to form from `queue` now, by Triton's rules: the indices of its
// calls (the oldest first), or none when it should wait for more. `force`
// (closing, or nothing of the graph in flight) sends what there is without
// waiting.
std::vector<size_t> FormBatch(const std::deque<Queued>& queue,
                              const DynamicBatchingOptions& options, bool force,
                              absl::Time now) {
  std::vector<size_t> taken;
  const Shape& key = queue.front().call.input_shape;
  int64_t total = 0;
  bool full = false;
  // Sizes the batch reaches as calls join, with the calls taken by then.
  std::vector<std::pair<int64_t, size_t>> reached;
  for (size_t i = 0; i < queue.size(); ++i) {
    const Shape& shape = queue[i].call.input_shape;
    if (!SameBatchKey(shape, key)) continue;
    if (taken.empty() && shape[0] >= options.max_batch_size) {
      return {i};  // as large as a batch may be, or larger: it runs alone
    }
    if (total + shape[0] > options.max_batch_size) {
      full = true;  // the next in line does not fit: the batch cannot grow
      break;
    }
    taken.push_back(i);
    total += shape[0];
    reached.emplace_back(total, taken.size());
    if (total == options.max_batch_size) {
      full = true;
      break;
    }
  }
  // The largest preferred size reachable in arrival order.
  for (auto it = reached.rbegin(); it != reached.rend(); ++it) {
    if (std::binary_search(options.preferred_batch_sizes.begin(),
                           options.preferred_batch_sizes.end(), it->first)) {
      taken.resize(it->second);
      return taken;
    }
  }
  if (full || force || now >= queue.front().enqueued + options.max_queue_delay) return taken;
  return {};
}

}  // namespace

void DynamicBatcher::Loop() {
  State& state = *state_;
  const int limit = std::max(1, runner_->concurrency());
  absl::Time last_sweep = absl::InfinitePast();
  while (true) {
    std::vector<Queued> cancelled;
    InferBatch batch;
    absl::Time now;
    {
      absl::MutexLock lock(&state.mu);
      now = absl::Now();
      // Answered here, not when their turn comes: a request may wait long
      // behind batches in flight. At most once per kCancelSweep: the loop
      // runs for every arrival.
      if (now - last_sweep >= kCancelSweep) {
        last_sweep = now;
        for (auto it = state.queue.begin(); it != state.queue.end();) {
          if (IsCancelled(it->call)) {
            cancelled.push_back(std::move(*it));
            it = state.queue.erase(it);
          } else {
            ++it;
          }
        }
      }
      if (cancelled.empty()) {
        if (state.queue.empty()) {
          if (state.closed) return;
          state.mu.Await(absl::Condition(
              +[](State* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
                return s->closed || !s->queue.empty();
              },
              &state));
          continue;
        }
        std::vector<size_t> taken;
        if (state.closed || state.inflight < limit) {
          // Waiting for batch-mates pays only while a batch runs: with none
          // in flight the runner would sit idle for this graph meanwhile.
          const bool idle = options_.dispatch_when_idle && state.inflight == 0;
          taken = FormBatch(state.queue, options_, state.closed || idle, now);
        }
        if (taken.empty()) {
          // Wait for a slot, a new request, the oldest one's delay to run
          // out, or the next sweep for cancelled requests.
          absl::Time wake = now + kCancelSweep;
          if (state.inflight < limit) {
            wake = std::min(wake, state.queue.front().enqueued + options_.max_queue_delay);
          }
          struct Watch {
            State* state;
            int64_t arrivals;
            int inflight;
          } watch{&state, state.arrivals, state.inflight};
          state.mu.AwaitWithDeadline(
              absl::Condition(
                  +[](Watch* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->state->mu) {
                    return w->state->closed || w->state->arrivals != w->arrivals ||
                           w->state->inflight < w->inflight;
                  },
                  &watch),
              wake);
          continue;
        }
        // Taken in arrival order; erased from the back so indices hold.
        for (size_t i : taken) {
          batch.delays.push_back(absl::ToDoubleSeconds(now - state.queue[i].enqueued));
          batch.calls.push_back(std::move(state.queue[i].call));
        }
        for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
          state.queue.erase(state.queue.begin() + static_cast<std::ptrdiff_t>(*it));
        }
        ++state.inflight;
      }
    }
    for (Queued& q : cancelled) {
      InferTimings timings;
      timings.queue = absl::ToDoubleSeconds(now - q.enqueued);
      timings.batch_delay = timings.queue;
      q.call.done(absl::CancelledError("the client cancelled or the deadline passed while the "
                                       "request waited to be batched"),
                  {}, timings);
    }
    if (batch.calls.empty()) continue;
    // The batch leaves the batcher's count when the runner answers its first
    // call: its execution is over then, and the next batch can form while
    // the rest are answered (on the runner's completion threads, say).
    auto left = std::make_shared<std::atomic<bool>>(false);
    for (InferCall& call : batch.calls) {
      call.done = [state = state_, left, done = std::move(call.done)](
                      const absl::Status& status, const Shape& shape,
                      const InferTimings& timings) {
        if (!left->exchange(true)) {
          absl::MutexLock lock(&state->mu);
          --state->inflight;
        }
        done(status, shape, timings);
      };
    }
    runner_->SubmitBatch(std::move(batch));
  }
}

}  // namespace convserve
