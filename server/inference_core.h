// What both wire protocols share: the loaded graphs, the backend and the
// request workers. It speaks engine types only; server/proto_convert.cc
// translates the wire messages. Thread-safe.
#ifndef CONVSERVE_SERVER_INFERENCE_CORE_H_
#define CONVSERVE_SERVER_INFERENCE_CORE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend.h"
#include "engine/graph.h"
#include "server/graph_registry.h"
#include "server/request_executor.h"

namespace convserve {

struct InferenceCoreOptions {
  // Limits every graph and tensor must respect.
  GraphLimits graph_limits;
  // How many graphs and parameter bytes may be loaded.
  GraphRegistryOptions registry;
  // Request workers and their queue.
  RequestExecutorOptions executor;
};

// One inference request. The caller keeps `input` and `output` alive until
// `done` runs.
struct InferCall {
  // The graph to run; the call holds it, so an unload cannot free it early.
  std::shared_ptr<const Graph> graph;
  // Logical N, C, spatial... of the input.
  Shape input_shape;
  // Exactly the input tensor's bytes (graph dtype and layout).
  absl::Span<const uint8_t> input;
  // Resized to the output tensor's bytes and filled on success.
  std::string* output = nullptr;
  // Polled before the work starts; true skips it with CANCELLED.
  std::function<bool()> cancelled;
  // Called exactly once, on a worker thread or (for errors found before
  // queueing) on the caller's; `output_shape` is set on success.
  std::function<void(const absl::Status& status, const Shape& output_shape)> done;
};

class InferenceCore {
 public:
  static absl::StatusOr<std::unique_ptr<InferenceCore>> Create(
      const InferenceCoreOptions& options, std::unique_ptr<Backend> backend);

  // Validates and registers a graph.
  absl::StatusOr<GraphRegistry::AddResult> LoadGraph(GraphSpec spec);
  absl::Status UnloadGraph(const std::string& name_or_id);
  absl::StatusOr<std::shared_ptr<const Graph>> FindGraph(const std::string& name_or_id) const;
  std::vector<std::shared_ptr<const Graph>> ListGraphs() const;

  // Checks the request, queues it and returns; `call.done` reports the end.
  void Infer(InferCall call);

  // True until Drain starts.
  bool ready() const { return ready_.load(); }
  // Refuses new requests (UNAVAILABLE) and waits for accepted ones.
  void Drain();

  const Backend& backend() const { return *backend_; }

 private:
  InferenceCore(const InferenceCoreOptions& options, std::unique_ptr<Backend> backend);

  // Compiles and runs; on a worker thread.
  absl::Status Execute(const InferCall& call, Shape* output_shape);

  const InferenceCoreOptions options_;
  const std::unique_ptr<Backend> backend_;
  GraphRegistry registry_;
  std::atomic<bool> ready_{true};
  // Last member: destroyed first, so workers finish before the backend goes.
  RequestExecutor executor_;
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_INFERENCE_CORE_H_
