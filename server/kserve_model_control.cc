// KServeService: Triton's model configuration, statistics and model
// repository extensions, and the trace and logging ones it does not serve.
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/grpc_status.h"
#include "server/kserve_model_config.h"
#include "server/kserve_service.h"
#include "server/kserve_statistics.h"

namespace convserve {
namespace {

// convserve has one repository, the loaded graphs, and it has no name.
absl::Status CheckRepositoryName(const std::string& repository_name) {
  if (repository_name.empty()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("convserve has no repository named '", repository_name,
                                          "'; leave repository_name empty"));
}

}  // namespace

void KServeService::ModelConfig(ServerCall* rpc, const inference::ModelConfigRequest* request,
                                inference::ModelConfigResponse* response) {
  absl::StatusOr<std::shared_ptr<const Graph>> graph =
      FindModel(request->name(), request->version());
  if (!graph.ok()) return FinishCall(rpc, graph.status());
  const std::optional<DynamicBatchingOptions> batching = core_->Batching((*graph)->id());
  KServeModelConfigToProto(**graph, response->mutable_config(), batching ? &*batching : nullptr);
  return FinishCall(rpc, absl::OkStatus());
}

void KServeService::ModelStatistics(ServerCall* rpc,
                                    const inference::ModelStatisticsRequest* request,
                                    inference::ModelStatisticsResponse* response) {
  std::vector<std::shared_ptr<const Graph>> graphs;
  if (request->name().empty()) {
    if (!request->version().empty()) {
      return FinishCall(
          rpc, absl::InvalidArgumentError("a version without a model name; give the name too"));
    }
    graphs = core_->ListGraphs();
  } else {
    absl::StatusOr<std::shared_ptr<const Graph>> graph =
        FindModel(request->name(), request->version());
    if (!graph.ok()) return FinishCall(rpc, graph.status());
    graphs.push_back(*std::move(graph));
  }
  // Figures are kept by graph name; a loaded graph that has served nothing
  // is listed with zeros, as Triton lists it.
  const v1::GetStatisticsResponse figures = metrics_->Statistics("");
  for (const std::shared_ptr<const Graph>& graph : graphs) {
    v1::GraphStatistics graph_figures;
    for (const v1::GraphStatistics& g : figures.graphs()) {
      if (g.name() == graph->name()) graph_figures = g;
    }
    KServeStatisticsToProto(graph->name(), graph_figures, response->add_model_stats());
  }
  return FinishCall(rpc, absl::OkStatus());
}

void KServeService::RepositoryIndex(ServerCall* rpc,
                                    const inference::RepositoryIndexRequest* request,
                                    inference::RepositoryIndexResponse* response) {
  absl::Status status = CheckRepositoryName(request->repository_name());
  if (!status.ok()) return FinishCall(rpc, status);
  absl::flat_hash_set<std::string> loaded;
  for (const std::shared_ptr<const Graph>& graph : core_->ListGraphs()) {
    inference::RepositoryIndexResponse::ModelIndex* model = response->add_models();
    model->set_name(graph->name());
    model->set_version("1");
    // Triton's states: a graph warming up is still LOADING; one whose
    // warm-up failed is UNAVAILABLE with the reason (it serves all the same).
    const WarmupStatus warmup = core_->WarmupOf(graph->id());
    switch (warmup.state) {
      case WarmupState::kWarming:
        model->set_state("LOADING");
        model->set_reason("warming up");
        break;
      case WarmupState::kFailed:
        model->set_state("UNAVAILABLE");
        model->set_reason(absl::StrCat("warm-up failed: ", warmup.error));
        break;
      case WarmupState::kReady:
        model->set_state("READY");
        break;
    }
    loaded.insert(graph->name());
  }
  // The graph directory's graphs that are not loaded, as Triton lists the
  // unloaded models of its repository (unless only ready ones are asked for).
  if (repository_ != nullptr && !request->ready()) {
    absl::StatusOr<std::vector<std::string>> names = repository_->List();
    if (!names.ok()) return FinishCall(rpc, names.status());
    for (const std::string& name : *names) {
      if (loaded.contains(name)) continue;
      inference::RepositoryIndexResponse::ModelIndex* model = response->add_models();
      model->set_name(name);
      model->set_state("UNAVAILABLE");
      model->set_reason("unloaded");
    }
  }
  return FinishCall(rpc, absl::OkStatus());
}

void KServeService::RepositoryModelLoad(ServerCall* rpc,
                                        const inference::RepositoryModelLoadRequest* request,
                                        inference::RepositoryModelLoadResponse*) {
  absl::Status status = management_->Authorize(rpc->client_metadata(), "RepositoryModelLoad");
  if (status.ok()) status = CheckRepositoryName(request->repository_name());
  if (!status.ok()) return FinishCall(rpc, status);
  const std::string& name = request->model_name();
  if (name.empty()) return FinishCall(rpc, absl::InvalidArgumentError("model_name is required"));
  for (const auto& [key, value] : request->parameters()) {
    if (key == "config" || absl::StartsWith(key, "file:")) {
      return FinishCall(rpc, absl::UnimplementedError(absl::StrCat(
                                 "loading model '", name, "' from parameter '", key,
                                 "' is not supported: convserve loads graphs "
                                 "(convserve.v1.GraphDef), "
                                 "not Triton model files; put the graph in the server's "
                                 "--graph_dir or "
                                 "register it with convserve.v1.ConvServe/LoadGraph, e.g. "
                                 "convserve-load "
                                 "--graph_file=FILE")));
    }
  }
  if (repository_ != nullptr) {
    absl::StatusOr<GraphSpec> spec = repository_->Read(name);
    if (spec.ok()) {
      // Loading the directory's graph again is a no-op; a different graph
      // under its name stays until it is unloaded (ALREADY_EXISTS says so).
      // With --warmup_shapes, answered once the warm-up has ended (from its
      // thread, not holding this one), as Triton answers once the model is
      // loaded; a FAILED warm-up is reported by ModelReady and the index.
      WarmupRequest warmup;
      warmup.wait = false;
      absl::StatusOr<GraphRegistry::AddResult> added =
          core_->LoadGraph(*std::move(spec), std::nullopt, warmup);
      if (!added.ok()) return FinishCall(rpc, added.status());
      core_->WhenWarmedUp(added->graph, [rpc](absl::StatusOr<WarmupStatus> ended) {
        rpc->Finish(ToGrpcStatus(ended.status()));
      });
      return;
    }
    if (!absl::IsNotFound(spec.status()) || !core_->FindGraph(name).ok()) {
      return FinishCall(rpc, spec.status());
    }
  }
  // A loaded graph cannot change under its name (a different graph is
  // ALREADY_EXISTS), so reloading it is a no-op.
  if (core_->FindGraph(name).ok()) return FinishCall(rpc, absl::OkStatus());
  return FinishCall(rpc, absl::FailedPreconditionError(absl::StrCat(
                             "model '", name,
                             "' is not loaded, and convserve-server has no graph directory "
                             "to load it "
                             "from: start it with --graph_dir, or register the graph with "
                             "convserve.v1.ConvServe/LoadGraph, e.g. convserve-load "
                             "--graph_file=FILE "
                             "(then load_model of its name succeeds)")));
}

void KServeService::RepositoryModelUnload(ServerCall* rpc,
                                          const inference::RepositoryModelUnloadRequest* request,
                                          inference::RepositoryModelUnloadResponse*) {
  absl::Status status = management_->Authorize(rpc->client_metadata(), "RepositoryModelUnload");
  if (status.ok()) status = CheckRepositoryName(request->repository_name());
  if (!status.ok()) return FinishCall(rpc, status);
  absl::StatusOr<std::shared_ptr<const Graph>> graph = FindModel(request->model_name(), "");
  if (!graph.ok()) return FinishCall(rpc, graph.status());
  // Requests already holding the graph finish with it.
  status = core_->UnloadGraph((*graph)->id());
  if (absl::IsNotFound(status)) {
    status = absl::NotFoundError(absl::StrCat("model '", request->model_name(), "' is not loaded"));
  }
  return FinishCall(rpc, status);
}

void KServeService::TraceSetting(ServerCall* rpc, const inference::TraceSettingRequest*,
                                 inference::TraceSettingResponse*) {
  return FinishCall(
      rpc, absl::UnimplementedError("convserve does not serve Triton's trace extension; per-stage "
                                    "timings are in ModelStatistics and on /metrics"));
}

void KServeService::LogSettings(ServerCall* rpc, const inference::LogSettingsRequest*,
                                inference::LogSettingsResponse*) {
  return FinishCall(rpc, absl::UnimplementedError(
                             "convserve does not serve Triton's logging extension; set the level "
                             "with convserve-server --log_level"));
}

}  // namespace convserve
