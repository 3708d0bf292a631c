#include "server/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace convserve {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const GrpcServerOptions& options,
                                                              InferenceCore* core) {
  if (options.max_message_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max message bytes must be >= 1, got ",
                                                   options.max_message_bytes));
  }
  absl::StatusOr<std::unique_ptr<ServerMetrics>> metrics =
      ServerMetrics::Create(options.metrics, core);
  if (!metrics.ok()) return metrics.status();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  ServerMetrics* refusal_metrics = metrics->get();
  absl::StatusOr<std::unique_ptr<GraphManagementPolicy>> management =
      GraphManagementPolicy::Create(
          options.graph_management,
          [refusal_metrics](absl::string_view rpc, absl::string_view reason) {
            refusal_metrics->GraphManagementRefused(rpc, reason);
          });
  if (!management.ok()) return management.status();
  // Before the graph directory loads: its graphs' warm-ups and plan builds
  // are counted too.
  ServerMetrics* early_metrics = metrics->get();
  core->set_warmup_observer(
      [early_metrics](const WarmupEvent& event) { early_metrics->GraphWarmedUp(event); });
  core->set_plan_build_observer(
      [early_metrics](const PlanBuildEvent& event) { early_metrics->PlanBuilt(event); });
  std::unique_ptr<GraphRepository> repository;
  if (!options.graph_dir.empty()) {
    absl::StatusOr<std::unique_ptr<GraphRepository>> opened =
        GraphRepository::Create(options.graph_dir);
    if (!opened.ok()) return opened.status();
    // Before the port opens: a ready server has all its graphs.
    absl::Status loaded = (*opened)->LoadAll(core);
    if (!loaded.ok()) {
      core->set_warmup_observer(nullptr);  // the metrics go with this failed start
      core->set_plan_build_observer(nullptr);
      return loaded;
    }
    repository = *std::move(opened);
  }
  if ((*management)->mode() == GraphManagementMode::kToken && !TlsEnabled(options.tls)) {
    spdlog::warn("--graph_management=token without TLS: the token crosses the network in "
                 "plain text; set --tls_cert_file and --tls_key_file");
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<GrpcServer> server(
      new GrpcServer(core, *std::move(metrics), options.shared_memory, *std::move(management),
                     std::move(repository)));
  ServerMetrics* raw_metrics = server->metrics_.get();
  core->set_execution_observer(
      [raw_metrics](const ExecutionEvent& event) { raw_metrics->ExecutionFinished(event); });
  GrpcServer* raw_server = server.get();
  core->set_device_failure_observer([raw_server, options](const DeviceFailure& failure) {
    if (failure.healthy_devices > 0 || raw_server->no_healthy_device_.exchange(true)) return;
    spdlog::critical("no GPU serves any more: health is NOT_SERVING; shutting down");
    if (raw_server->server_ != nullptr) {
      raw_server->server_->GetHealthCheckService()->SetServingStatus(false);
    }
    if (options.on_no_healthy_device) options.on_no_healthy_device();
  });
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, *credentials, &server->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.RegisterService(&server->convserve_);
  builder.RegisterService(&server->kserve_);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", options.listen_address,
                     "': the address is malformed or in use (--listen)"));
  }
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  return server;
}

GrpcServer::~GrpcServer() {
  Shutdown(absl::ZeroDuration());
  core_->set_plan_build_observer(nullptr);  // the metrics go with this server
  core_->set_warmup_observer(nullptr);
  core_->set_execution_observer(nullptr);
  core_->set_device_failure_observer(nullptr);
}

void GrpcServer::Shutdown(absl::Duration grace) {
  if (server_ == nullptr || shut_down_.exchange(true)) return;
  server_->GetHealthCheckService()->SetServingStatus(false);
  core_->Drain();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
}

}  // namespace convserve
