// What runs accepted requests: the CPU runner (worker threads over a Backend)
// or the GPU device pool. InferenceCore talks only to this interface.
// Implementations are thread-safe.
#ifndef CONVSERVE_ENGINE_RUNTIME_REQUEST_RUNNER_H_
#define CONVSERVE_ENGINE_RUNTIME_REQUEST_RUNNER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "engine/graph.h"
#include "engine/runtime/infer_call.h"

namespace convserve {

class RequestRunner {
 public:
  virtual ~RequestRunner() = default;

  // A graph was loaded: prepare what runs it (e.g. upload weights to every
  // GPU). Counted: each AddGraph is matched by one RemoveGraph.
  virtual absl::Status AddGraph(const std::shared_ptr<const Graph>& graph) = 0;
  // The matching release. Requests already accepted keep the graph's
  // resources until they finish; then they are freed.
  virtual void RemoveGraph(const std::string& graph_id) = 0;

  // Queues the call; `call.done` reports its end. The call's shape and
  // bytes were checked by the caller.
  virtual void Submit(InferCall call) = 0;

  // Refuses new calls (UNAVAILABLE) and returns when accepted ones are done.
  virtual void Drain() = 0;

  // For the start-up log.
  virtual std::string Describe() const = 0;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_REQUEST_RUNNER_H_
