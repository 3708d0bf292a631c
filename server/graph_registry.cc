#include "server/graph_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace convserve {

absl::StatusOr<GraphRegistry::AddResult> GraphRegistry::Add(std::shared_ptr<const Graph> graph) {
  absl::MutexLock lock(&mu_);
  auto it = by_name_.find(graph->name());
  if (it != by_name_.end()) {
    if (it->second->id() == graph->id()) return AddResult{it->second, true};
    return absl::AlreadyExistsError(
        absl::StrCat("graph name '", graph->name(), "' is taken by graph ", it->second->id(),
                     " with a different definition or weights; unload it first or pick "
                     "another name"));
  }
  if (static_cast<int>(by_name_.size()) >= options_.max_graphs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the server holds its limit of ", options_.max_graphs,
        " graphs (--max_graphs); unload one first"));
  }
  if (parameter_bytes_ + graph->parameter_bytes() > options_.max_parameter_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "loading ", graph->parameter_bytes(), " parameter bytes would pass the server's limit of ",
        options_.max_parameter_bytes, " (--max_parameter_bytes); ", parameter_bytes_,
        " are in use"));
  }
  parameter_bytes_ += graph->parameter_bytes();
  by_name_.emplace(graph->name(), graph);
  return AddResult{std::move(graph), false};
}

absl::Status GraphRegistry::Remove(const std::string& name_or_id) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<const Graph> graph = FindLocked(name_or_id);
  if (graph == nullptr) {
    return absl::NotFoundError(absl::StrCat("no graph named or with id '", name_or_id, "'"));
  }
  parameter_bytes_ -= graph->parameter_bytes();
  by_name_.erase(graph->name());
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Graph>> GraphRegistry::Find(
    const std::string& name_or_id) const {
  absl::ReaderMutexLock lock(&mu_);
  std::shared_ptr<const Graph> graph = FindLocked(name_or_id);
  if (graph == nullptr) {
    return absl::NotFoundError(absl::StrCat("no graph named or with id '", name_or_id,
                                            "' is loaded"));
  }
  return graph;
}

std::shared_ptr<const Graph> GraphRegistry::FindLocked(const std::string& name_or_id) const {
  auto it = by_name_.find(name_or_id);
  if (it != by_name_.end()) return it->second;
  // Ids are looked up by scan: the registry holds few graphs (--max_graphs).
  for (const auto& [name, graph] : by_name_) {
    if (graph->id() == name_or_id) return graph;
  }
  return nullptr;
}

std::vector<std::shared_ptr<const Graph>> GraphRegistry::List() const {
  std::vector<std::shared_ptr<const Graph>> graphs;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [name, graph] : by_name_) graphs.push_back(graph);
  }
  std::sort(graphs.begin(), graphs.end(),
            [](const auto& a, const auto& b) { return a->name() < b->name(); });
  return graphs;
}

}  // namespace convserve
