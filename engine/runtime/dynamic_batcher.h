// Dynamic batching of one graph, with Triton's knobs and rules: requests
// whose inputs have the same shape but for N wait in a queue in front of the
// runner and are handed to it as one batch (RequestRunner::SubmitBatch),
// joined along N. A batch is formed when the runner can take one (fewer than
// RequestRunner::concurrency() of this graph's batches in flight; a batch is
// in flight until the runner answers its first call), from the
// oldest request and the later ones of its shape, in arrival order, up to
// max_batch_size: cut at the largest preferred size it can reach; else sent
// as it is once it is full, the oldest request has waited max_queue_delay
// (0: at once, so only what queued meanwhile is joined), or (with
// dispatch_when_idle) none of the graph's batches is in flight.
// docs/runtime.md, "Dynamic batching". Thread-safe.
#ifndef CONVSERVE_ENGINE_RUNTIME_DYNAMIC_BATCHER_H_
#define CONVSERVE_ENGINE_RUNTIME_DYNAMIC_BATCHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/runtime/infer_call.h"
#include "engine/runtime/request_runner.h"

namespace convserve {

struct DynamicBatchingOptions {
  // Largest sum of N joined into one execution; 0 turns batching off. A
  // request whose own N is larger runs alone.
  int64_t max_batch_size = 0;
  // How long the oldest queued request may wait for batch-mates when no
  // preferred size (and not max_batch_size) can be formed yet.
  absl::Duration max_queue_delay = absl::ZeroDuration();
  // Batch sizes to cut at when reachable, the largest first; each in
  // 1..max_batch_size. Empty: as large as possible.
  std::vector<int64_t> preferred_batch_sizes;
  // Requests waiting in the batcher before new ones get RESOURCE_EXHAUSTED.
  int max_queued = 256;
  // When none of the graph's batches is in flight, what waits is sent at
  // once: requests wait for batch-mates (at most max_queue_delay) only while
  // the runner is busy with the graph anyway. false: Triton's rule (the delay
  // is waited out even then).
  bool dispatch_when_idle = true;
};

// INVALID_ARGUMENT saying which setting is wrong (negative sizes or delay,
// preferred sizes outside 1..max_batch_size, a queue of no room).
absl::Status ValidateDynamicBatching(const DynamicBatchingOptions& options);

class DynamicBatcher {
 public:
  // For `graph_name` (in logs and errors). `runner` outlives the batcher.
  static absl::StatusOr<std::unique_ptr<DynamicBatcher>> Create(
      const DynamicBatchingOptions& options, RequestRunner* runner, std::string graph_name);
  // Close(); batches already handed to the runner finish on their own.
  ~DynamicBatcher();

  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // Queues the call (checked by the caller, as for RequestRunner::Submit);
  // `call.done` reports its end. A full queue answers RESOURCE_EXHAUSTED at
  // once. After Close the call goes to the runner alone.
  void Submit(InferCall call);

  // Hands every queued request to the runner now (no delay, no limit on
  // batches in flight), stops the batcher's thread and returns; later calls
  // go to the runner alone. Idempotent. Drain and unload call it before the
  // runner drains or drops the graph, so no accepted request is lost.
  void Close();

  const DynamicBatchingOptions& options() const { return options_; }
  // Requests waiting in the batcher now.
  int queued() const;

  // Shared with the completion callbacks of batches in flight, which may
  // outlive the batcher.
  struct State;

 private:
  DynamicBatcher(const DynamicBatchingOptions& options, RequestRunner* runner,
                 std::string graph_name);
  void Loop();

  const DynamicBatchingOptions options_;
  RequestRunner* const runner_;  // outlives this (see Create)
  const std::string graph_name_;
  const std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_DYNAMIC_BATCHER_H_
