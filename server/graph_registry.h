// The graphs a server has loaded, found by name or by id. Thread-safe.
#ifndef CONVSERVE_SERVER_GRAPH_REGISTRY_H_
#define CONVSERVE_SERVER_GRAPH_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/graph.h"

namespace convserve {

struct GraphRegistryOptions {
  // Graphs loaded at once (RESOURCE_EXHAUSTED beyond).
  int max_graphs = 64;
  // Weight and bias bytes of all loaded graphs together.
  int64_t max_parameter_bytes = int64_t{4} << 30;
};

class GraphRegistry {
 public:
  explicit GraphRegistry(const GraphRegistryOptions& options) : options_(options) {}

  struct AddResult {
    std::shared_ptr<const Graph> graph;
    // An identical graph (same id) was loaded already; nothing changed.
    bool already_loaded = false;
  };

  // Adds `graph`. ALREADY_EXISTS when another graph holds its name,
  // RESOURCE_EXHAUSTED past the limits.
  absl::StatusOr<AddResult> Add(std::shared_ptr<const Graph> graph);
  // Removes the graph named or identified by `name_or_id`. Requests that hold
  // it keep it alive until they finish.
  absl::Status Remove(const std::string& name_or_id);
  // NOT_FOUND names what was asked for.
  absl::StatusOr<std::shared_ptr<const Graph>> Find(const std::string& name_or_id) const;
  // Sorted by name.
  std::vector<std::shared_ptr<const Graph>> List() const;

 private:
  std::shared_ptr<const Graph> FindLocked(const std::string& name_or_id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const GraphRegistryOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Graph>> by_name_ ABSL_GUARDED_BY(mu_);
  int64_t parameter_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_GRAPH_REGISTRY_H_
