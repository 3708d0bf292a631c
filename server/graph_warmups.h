// The warm-up of each loaded graph (docs/runtime.md, "Warm-up at load"): its
// state (WARMING, READY, FAILED), the execution shapes asked for, how long it
// took and what failed, and one thread per graph that has the runner build
// the plans of each shape on every device. Thread-safe.
#ifndef CONVSERVE_SERVER_GRAPH_WARMUPS_H_
#define CONVSERVE_SERVER_GRAPH_WARMUPS_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/graph.h"
#include "engine/runtime/request_runner.h"

namespace convserve {

enum class WarmupState { kWarming, kReady, kFailed };

// "WARMING", "READY", "FAILED".
const char* WarmupStateName(WarmupState state);

struct WarmupStatus {
  // kReady for a graph that has nothing to warm up.
  WarmupState state = WarmupState::kReady;
  // Every execution shape asked for, warmed or not yet.
  std::vector<Shape> shapes;
  // Time spent warming up (so far, while warming).
  double seconds = 0;
  // kFailed: "input [N, C, H, W]: error" per failed shape, one per line.
  std::string error;
};

// One warm-up run that ended (not one stopped by an unload or shutdown).
struct WarmupEvent {
  std::string graph;
  bool ok = true;
  double seconds = 0;
};

class GraphWarmups {
 public:
  // `runner` outlives this object.
  explicit GraphWarmups(RequestRunner* runner) : runner_(runner) {}
  // Stop(), then waits for the threads.
  ~GraphWarmups();

  GraphWarmups(const GraphWarmups&) = delete;
  GraphWarmups& operator=(const GraphWarmups&) = delete;

  // Warms up `shapes` of `graph` (checked by the caller), those not asked for
  // before, in order, on the graph's thread; returns at once. With nothing
  // new to warm the state stays as it is.
  void Start(const std::shared_ptr<const Graph>& graph, const std::vector<Shape>& shapes);
  // What a warm-up ended with: its status; ABORTED when the graph was
  // unloaded meanwhile, UNAVAILABLE when the server began to shut down.
  using EndCallback = std::function<void(absl::StatusOr<WarmupStatus>)>;
  // Calls `done` once the graph's warm-up has ended: at once, on this
  // thread, when none is running; else from the warm-up thread as it ends.
  void WhenEnded(const std::string& graph_id, EndCallback done);
  // Blocks until the graph's warm-up has ended (WhenEnded, waited for).
  absl::StatusOr<WarmupStatus> Wait(const std::string& graph_id);
  // Now; a graph never warmed up is kReady with no shapes.
  WarmupStatus Get(const std::string& graph_id) const;
  // Graphs warming up now.
  int warming() const;

  // Stops the graph's warm-up after the plan being built and forgets the
  // graph; returns once its thread has stopped (so no plan of the graph is
  // built after this returns).
  void Remove(const std::string& graph_id);
  // Stops every warm-up after the plan being built (shutdown) and refuses
  // later ones; Join waits for their threads.
  void Stop();
  void Join();

  // Called from a warm-up thread as each run ends; set once, before any
  // graph is loaded.
  void set_observer(std::function<void(const WarmupEvent&)> observer) {
    observer_ = std::move(observer);
  }

 private:
  struct Entry;
  void Run(std::shared_ptr<Entry> entry);
  WarmupStatus StatusLocked(const Entry& entry) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // What a waiter hears once the entry's run has ended.
  absl::StatusOr<WarmupStatus> EndedLocked(const Entry& entry) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  RequestRunner* const runner_;
  std::function<void(const WarmupEvent&)> observer_;
  mutable absl::Mutex mu_;
  // By graph id.
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  // Threads of removed graphs and of finished runs, joined by Join or the
  // destructor (or by Remove, for its graph's).
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_GRAPH_WARMUPS_H_
