#include "server/graph_repository.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/graph_file.h"
#include "engine/status_macros.h"
#include "server/proto_convert.h"
#include "spdlog/spdlog.h"

namespace convserve {
namespace {

// The file kinds ReadGraphFile reads (client/graph_file.h), by extension.
constexpr const char* kExtensions[] = {".pb", ".binpb", ".textproto", ".txtpb", ".json"};

bool IsGraphFile(const std::filesystem::path& path) {
  const std::string extension = path.extension().string();
  return std::find_if(std::begin(kExtensions), std::end(kExtensions), [&](const char* e) {
           return extension == e;
         }) != std::end(kExtensions);
}

absl::Status CheckName(const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("a graph name is required");
  if (name[0] == '.' || absl::StrContains(name, '/') || absl::StrContains(name, '\\') ||
      absl::StrContains(name, '\0')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", name, "' is not a graph name of the graph directory (a file stem: no '/', no "
                   "leading '.')"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GraphRepository>> GraphRepository::Create(const std::string& dir) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return absl::NotFoundError(
        absl::StrCat("the graph directory '", dir, "' is not a readable directory (--graph_dir)"));
  }
  return std::unique_ptr<GraphRepository>(new GraphRepository(dir));
}

absl::StatusOr<std::vector<std::string>> GraphRepository::List() const {
  std::error_code error;
  std::vector<std::string> names;
  for (std::filesystem::directory_iterator it(dir_, error), end; !error && it != end;
       it.increment(error)) {
    const std::filesystem::path& path = it->path();
    if (path.filename().string()[0] == '.' || !it->is_regular_file(error) || !IsGraphFile(path)) {
      continue;
    }
    names.push_back(path.stem().string());
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot list the graph directory '", dir_, "': ", error.message()));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

absl::StatusOr<std::string> GraphRepository::FindFile(const std::string& name) const {
  RETURN_IF_ERROR(CheckName(name));
  std::vector<std::string> found;
  for (const char* extension : kExtensions) {
    const std::filesystem::path path = std::filesystem::path(dir_) / (name + extension);
    std::error_code error;
    if (std::filesystem::is_regular_file(path, error)) found.push_back(path.string());
  }
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat("the graph directory '", dir_,
                                            "' has no graph '", name, "' (", name,
                                            ".pb, .binpb, .textproto, .txtpb or .json)"));
  }
  if (found.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("graph '", name, "' has ", found.size(),
                                                   " files in the graph directory (",
                                                   absl::StrJoin(found, ", "),
                                                   "); keep one"));
  }
  return found.front();
}

absl::StatusOr<GraphSpec> GraphRepository::Read(const std::string& name) const {
  ASSIGN_OR_RETURN(std::string path, FindFile(name));
  absl::StatusOr<v1::GraphDef> graph = ReadGraphFile(path);
  if (!graph.ok()) {
    // NOT_FOUND from the reader means unreadable here: the file was listed.
    if (absl::IsNotFound(graph.status())) {
      return absl::InvalidArgumentError(graph.status().message());
    }
    return graph.status();
  }
  if (graph->name().empty()) graph->set_name(name);
  if (graph->name() != name) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the GraphDef is named '", graph->name(), "' but its file says '", name,
        "'; leave name empty or make them equal"));
  }
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&*graph);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

absl::Status GraphRepository::LoadAll(InferenceCore* core) const {
  ASSIGN_OR_RETURN(std::vector<std::string> names, List());
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(GraphSpec spec, Read(name));
    absl::StatusOr<GraphRegistry::AddResult> added = core->LoadGraph(std::move(spec));
    if (!added.ok()) {
      return absl::Status(added.status().code(),
                          absl::StrCat("graph '", name, "' of the graph directory '", dir_,
                                       "': ", added.status().message()));
    }
  }
  spdlog::info("graph directory '{}': {} graphs loaded", dir_, names.size());
  return absl::OkStatus();
}

}  // namespace convserve
