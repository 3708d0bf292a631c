#include "server/grpc_server.h"

#include <algorithm>
#include <string>
#include <vector>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace convserve {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const GrpcServerOptions& options,
                                                              InferenceCore* core) {
  if (options.grpc_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gRPC threads must be >= 1, got ", options.grpc_threads));
  }
  if (options.grpc_queues < 1 || options.grpc_queues > options.grpc_threads) {
    return absl::InvalidArgumentError(
        absl::StrCat("gRPC completion queues must be 1 to the gRPC threads (",
                     options.grpc_threads, "), got ", options.grpc_queues));
  }
  std::vector<std::string> addresses;
  for (absl::string_view address :
       absl::StrSplit(options.listen_address, ',', absl::SkipWhitespace())) {
    addresses.emplace_back(absl::StripAsciiWhitespace(address));
  }
  if (addresses.empty()) {
    return absl::InvalidArgumentError("no address to listen on (--listen)");
  }
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
  // Reflection is gRPC's plugin (synchronous API): its threads only poll
  // their own queue, which costs the other calls nothing (docs/runtime.md).
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
    raw_server->health_.SetServing(false);
    if (options.on_no_healthy_device) options.on_no_healthy_device();
  });
  grpc::ServerBuilder builder;
  // One bound port per address; AddListeningPort writes them at BuildAndStart.
  server->addresses_ = addresses;
  server->ports_.assign(addresses.size(), 0);
  for (size_t i = 0; i < addresses.size(); ++i) {
    builder.AddListeningPort(addresses[i], *credentials, &server->ports_[i]);
  }
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.RegisterService(server->convserve_.grpc_service());
  builder.RegisterService(server->kserve_.grpc_service());
  builder.RegisterService(server->health_.grpc_service());
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;
  for (int i = 0; i < options.grpc_queues; ++i) queues.push_back(builder.AddCompletionQueue());
  server->server_ = builder.BuildAndStart();
  server->threads_ = std::make_unique<QueueThreads>(std::move(queues), options.grpc_threads);
  if (server->server_ == nullptr) {
    server->threads_->Stop();
    // gRPC binds the addresses in order and stops at the first that fails,
    // whose port stays 0.
    const auto unbound = std::find(server->ports_.begin(), server->ports_.end(), 0);
    const std::string culprit = unbound != server->ports_.end()
                                    ? addresses[unbound - server->ports_.begin()]
                                    : options.listen_address;
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on '", culprit, "': the address is malformed or in use (--listen)"));
  }
  // Calls asked for ahead on each queue: the hot methods' enough for a
  // burst of requests in flight (more wait in gRPC until asked for).
  constexpr int kHotCalls = 32;
  for (int i = 0; i < server->threads_->queue_count(); ++i) {
    const CallQueue queue = server->threads_->queue(i);
    server->convserve_.Listen(queue, kHotCalls, &server->control_);
    server->kserve_.Listen(queue, kHotCalls, &server->control_);
    server->health_.Listen(queue);
  }
  server->threads_->Start();
  server->health_.SetServing(true);
  // A GPU lost while the server started turned health NOT_SERVING (the
  // observer sets the flag first): it stays so.
  if (server->no_healthy_device_.load()) server->health_.SetServing(false);
  return server;
}

std::string GrpcServer::addresses() const {
  std::vector<std::string> described;
  for (size_t i = 0; i < addresses_.size(); ++i) {
    const bool socket = absl::StartsWith(addresses_[i], "unix:") ||
                        absl::StartsWith(addresses_[i], "unix-abstract:");
    described.push_back(socket ? addresses_[i]
                               : absl::StrCat(addresses_[i], " (port ", ports_[i], ")"));
  }
  return absl::StrJoin(described, ", ");
}

GrpcServer::~GrpcServer() {
  Shutdown(absl::ZeroDuration());
  core_->set_plan_build_observer(nullptr);  // the metrics go with this server
  core_->set_warmup_observer(nullptr);
  core_->set_execution_observer(nullptr);
  core_->set_device_failure_observer(nullptr);
}

void GrpcServer::Shutdown(absl::Duration grace) {
  absl::MutexLock lock(&shutdown_mu_);  // a second caller returns once the first is done
  if (server_ == nullptr || shut_down_) return;
  shut_down_ = true;
  health_.Shutdown();
  core_->Drain();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  threads_->Stop();  // after the server: its calls' last events ran on them
  control_.Drain();
}

}  // namespace convserve
