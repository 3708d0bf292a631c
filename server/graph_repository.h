// Graphs kept as files in one directory (--graph_dir), the way Triton keeps
// models in a model repository: the server loads them all at start, so it can
// run with graph management off, and KServe RepositoryModelLoad can name them.
// A graph file is NAME.pb or NAME.binpb (a binary convserve.v1.GraphDef, its
// weights inside, as LoadGraph would send it), NAME.textproto, NAME.txtpb or
// NAME.json (text forms, weights as bytes fields); the graph is named NAME.
// Thread-safe: it holds only the directory's path.
#ifndef CONVSERVE_SERVER_GRAPH_REPOSITORY_H_
#define CONVSERVE_SERVER_GRAPH_REPOSITORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/graph.h"
#include "server/inference_core.h"

namespace convserve {

class GraphRepository {
 public:
  // NOT_FOUND unless `dir` is a readable directory.
  static absl::StatusOr<std::unique_ptr<GraphRepository>> Create(const std::string& dir);

  // The graph names the directory holds, sorted; files of other kinds
  // (README, hidden files, subdirectories) are skipped.
  absl::StatusOr<std::vector<std::string>> List() const;

  // Reads graph `name` from its file: INVALID_ARGUMENT for a name that is
  // not a plain file stem (no '/', no leading '.'), for two files of one
  // name, for a file that does not parse, or for a GraphDef whose own name
  // differs; NOT_FOUND when the directory has no such graph.
  absl::StatusOr<GraphSpec> Read(const std::string& name) const;

  // Loads every graph into `core`; the first failure is returned, naming
  // the file (a server must not start with part of its repository).
  absl::Status LoadAll(InferenceCore* core) const;

  const std::string& dir() const { return dir_; }

 private:
  explicit GraphRepository(std::string dir) : dir_(std::move(dir)) {}
  // The file of graph `name`; NOT_FOUND when there is none.
  absl::StatusOr<std::string> FindFile(const std::string& name) const;

  const std::string dir_;
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_GRAPH_REPOSITORY_H_
