#include "client/load_session.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/graph_file.h"
#include "client/kserve_request_sender.h"

namespace convserve {

int AutoConnections(int most_in_flight) {
  return std::clamp((most_in_flight + 15) / 16, 1, 8);
}

namespace {

absl::Status Annotate(const std::string& what, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

// Polls ServerLive until it answers true or `wait` has passed.
absl::Status WaitForServer(ConvServeClient& client, absl::Duration wait) {
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(wait);
  absl::StatusOr<bool> live = client.ServerLive();
  while (!(live.ok() && *live) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    live = client.ServerLive();
  }
  if (!live.ok()) return Annotate("waiting for " + client.options().address, live.status());
  return absl::OkStatus();
}

// One client per server for admin calls (LoadGraph, GetStatistics). A
// balanced channel reaches one of its backends per call, so for a resolver
// target each address it resolves to now gets a channel of its own.
absl::Status AdminClients(const ServerPool& pool, const ClientOptions& base,
                          std::vector<std::unique_ptr<ConvServeClient>>* own,
                          std::vector<ConvServeClient*>* servers) {
  if (!pool.balanced()) {
    *servers = pool.servers();
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> addresses = pool.ResolveServers();
  if (!addresses.ok()) return Annotate("resolving --server", addresses.status());
  for (const std::string& address : *addresses) {
    ClientOptions options = base;
    options.address = address;
    own->push_back(std::make_unique<ConvServeClient>(options));
    servers->push_back(own->back().get());
  }
  return absl::OkStatus();
}

// A graph file may leave spatial_rank 0: the layout's then.
int SpatialRank(const v1::GraphDef& def) {
  if (def.spatial_rank() > 0) return def.spatial_rank();
  return def.layout() == v1::NCDHW || def.layout() == v1::NDHWC ? 3 : 2;
}

// The input shape of the run: --input_shape (N replaced by --batch), or
// 1, C, 32, 32(, 32).
std::vector<int64_t> RunInputShape(const v1::GraphDef& def, const LoadSessionOptions& options) {
  std::vector<int64_t> shape;
  if (options.input_shape.empty()) {
    shape = {1, def.input_channels()};
    shape.resize(2 + SpatialRank(def), 32);
  } else {
    shape = options.input_shape;
  }
  if (options.batch > 0 && !shape.empty()) shape[0] = options.batch;
  return shape;
}

// The warm-up part of the LoadGraph request (--warmup_shapes).
absl::Status SetWarmup(const LoadSessionOptions& options, const v1::GraphDef& def,
                       v1::LoadGraphRequest* request) {
  const auto add = [request](const std::vector<int64_t>& dims) {
    v1::TensorShape* shape = request->mutable_warmup()->add_shapes();
    for (int64_t d : dims) shape->add_dims(d);
  };
  switch (options.warmup) {
    case LoadWarmup::kServer:
      return absl::OkStatus();
    case LoadWarmup::kNone:
      request->mutable_warmup()->set_disabled(true);
      return absl::OkStatus();
    case LoadWarmup::kInput:
      add(RunInputShape(def, options));
      return absl::OkStatus();
    case LoadWarmup::kList:
      for (const WarmupSize& size : options.warmup_sizes) {
        const int rank = SpatialRank(def);
        if (static_cast<int>(size.spatial.size()) != rank) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--warmup_shapes entry ", WarmupSizeToString(size), " has ", size.spatial.size(),
              " spatial dims; graph '", def.name(), "' has ", rank));
        }
        std::vector<int64_t> dims = {size.batch, def.input_channels()};
        dims.insert(dims.end(), size.spatial.begin(), size.spatial.end());
        add(dims);
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

// "warmed up 2 shape(s) in 0.12 s", or what became of the warm-up.
std::string DescribeWarmup(const v1::GraphInfo& info) {
  if (info.warmup_shapes_size() == 0) return "";
  switch (info.state()) {
    case v1::GraphInfo::READY:
      return absl::StrFormat(", warmed up %d shape(s) in %.3f s", info.warmup_shapes_size(),
                             info.warmup_seconds());
    case v1::GraphInfo::WARMING:
      return ", warming up";
    case v1::GraphInfo::FAILED:
      return absl::StrCat(", warm-up FAILED: ", info.warmup_error());
    default:
      return "";
  }
}

// Loads the graph on every server. Behind a balanced target an address that
// does not take it is dropped from `servers` (the balancer skips what it
// cannot reach too), as long as one took it. A warm-up this run asked for
// that failed fails the run (its requests would fail the same way).
absl::Status LoadOnEveryServer(const ServerPool& pool, const v1::GraphDef& graph,
                               const LoadSessionOptions& options,
                               const std::function<void(const std::string&)>& log,
                               std::vector<ConvServeClient*>* servers) {
  const bool several = servers->size() > 1 || pool.balanced();
  v1::LoadGraphRequest request;
  *request.mutable_graph() = graph;
  absl::Status warmup = SetWarmup(options, graph, &request);
  if (!warmup.ok()) return warmup;
  std::vector<ConvServeClient*> loaded;
  for (ConvServeClient* client : *servers) {
    absl::StatusOr<v1::LoadGraphResponse> response = client->LoadGraph(request);
    if (!response.ok()) {
      if (!pool.balanced()) return Annotate("LoadGraph", response.status());
      log(absl::StrCat("could not load graph '", graph.name(), "' on ", client->options().address,
                       ": ", response.status().ToString()));
      continue;
    }
    log(absl::StrCat("loaded graph '", graph.name(), "' id=", response->graph_id(),
                     response->already_loaded() ? " (already loaded)" : "",
                     several ? " on " + client->options().address : "",
                     DescribeWarmup(response->graph())));
    if (response->graph().state() == v1::GraphInfo::FAILED &&
        (options.warmup == LoadWarmup::kInput || options.warmup == LoadWarmup::kList)) {
      return absl::FailedPreconditionError(
          absl::StrCat("LoadGraph: the warm-up of graph '", graph.name(), "' on ",
                       client->options().address, " failed: ", response->graph().warmup_error()));
    }
    loaded.push_back(client);
  }
  if (loaded.empty()) {
    return absl::UnavailableError(
        absl::StrCat("LoadGraph: no server behind '", pool.targets().front(), "' took the graph"));
  }
  *servers = std::move(loaded);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadWarmup> ParseLoadWarmup(const std::string& text,
                                           std::vector<WarmupSize>* sizes) {
  sizes->clear();
  if (text == "input") return LoadWarmup::kInput;
  if (text == "server") return LoadWarmup::kServer;
  if (text == "none") return LoadWarmup::kNone;
  absl::StatusOr<std::vector<WarmupSize>> parsed = ParseWarmupSizes(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--warmup_shapes is input, server, none or a list of N:HxW: ", parsed.status().message()));
  }
  if (parsed->empty()) {
    return absl::InvalidArgumentError(
        "--warmup_shapes is empty; give input, server, none or a list of N:HxW");
  }
  *sizes = *std::move(parsed);
  return LoadWarmup::kList;
}

absl::StatusOr<std::vector<int64_t>> ParseShape(const std::string& text) {
  std::vector<int64_t> shape;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t d;
    if (!absl::SimpleAtoi(part, &d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--input_shape '", text, "' is not a comma-separated list of ints"));
    }
    shape.push_back(d);
  }
  return shape;
}

absl::StatusOr<std::unique_ptr<LoadSession>> LoadSession::Create(
    const LoadSessionOptions& options, const std::function<void(const std::string&)>& log) {
  if (options.graph.empty() == options.graph_file.empty()) {
    return absl::InvalidArgumentError("give exactly one of --graph_file, --graph");
  }
  if (options.verify && options.graph_file.empty()) {
    return absl::InvalidArgumentError(
        "--verify needs --graph_file: the server does not return a graph's weights");
  }
  if (options.protocol != Protocol::kKServe) {
    if (options.shared_memory != SharedMemoryKind::kNone) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shared_memory=", SharedMemoryKindName(options.shared_memory),
          " needs --protocol=kserve: shared memory is a KServe extension (convserve.v1 Infer "
          "carries tensors in its messages)"));
    }
    if (options.streaming) {
      return absl::InvalidArgumentError(
          "--streaming needs --protocol=kserve: it uses KServe's ModelStreamInfer");
    }
  }
  ClientOptions client_options;
  client_options.timeout = absl::ToChronoMilliseconds(options.timeout);
  client_options.tls = options.tls;
  client_options.graph_management_token = options.graph_management_token;
  absl::StatusOr<std::unique_ptr<ServerPool>> pool =
      ServerPool::Create(options.servers, client_options, options.connections);
  if (!pool.ok()) return pool.status();
  if (options.wait_for_server > absl::ZeroDuration()) {
    for (const auto& client : (*pool)->clients()) {
      absl::Status live = WaitForServer(*client, options.wait_for_server);
      if (!live.ok()) return live;
    }
  }

  std::vector<std::unique_ptr<ConvServeClient>> own_servers;
  std::vector<ConvServeClient*> servers;
  absl::Status listed = AdminClients(**pool, client_options, &own_servers, &servers);
  if (!listed.ok()) return listed;

  InferInput input;
  input.graph = options.graph;
  v1::GraphDef loaded;
  if (!options.graph_file.empty()) {
    absl::StatusOr<v1::GraphDef> graph = ReadGraphFile(options.graph_file);
    if (!graph.ok()) return Annotate("reading the graph", graph.status());
    absl::Status filled = FillParameters(options.seed, options.fill_bias, &*graph);
    if (!filled.ok()) return Annotate("filling parameters", filled);
    absl::Status loaded_all = LoadOnEveryServer(**pool, *graph, options, log, &servers);
    if (!loaded_all.ok()) return loaded_all;
    input.graph = graph->name();
    loaded = *std::move(graph);
  }
  absl::StatusOr<v1::GraphInfo> info = (*pool)->clients().front()->GetGraph(input.graph);
  if (!info.ok()) return Annotate("GetGraph", info.status());
  input.definition = info->definition();

  const v1::GraphDef& def = input.definition;
  input.shape = RunInputShape(def, options);
  int64_t count = 1;
  for (int64_t d : input.shape) count *= d;
  if (!options.input_file.empty()) {
    absl::StatusOr<std::string> bytes = ReadFileBytes(options.input_file);
    if (!bytes.ok()) return Annotate("reading --input_file", bytes.status());
    input.bytes = *std::move(bytes);
  } else {
    input.bytes = RandomTensorBytes(def.data_type(), count, options.input_seed);
  }

  std::unique_ptr<OutputVerifier> verifier;
  if (options.verify) {
    absl::StatusOr<std::unique_ptr<OutputVerifier>> created =
        OutputVerifier::Create(loaded, input.shape, input.bytes);
    if (!created.ok()) return Annotate("computing the reference output", created.status());
    verifier = *std::move(created);
  }

  std::unique_ptr<InferRequestSender> sender;
  if (options.protocol == Protocol::kConvServe) {
    sender = ConvServeRequestSender(input);
  } else {
    KServeSenderOptions kserve;
    kserve.shared_memory = options.shared_memory;
    kserve.cuda_device = options.cuda_device;
    kserve.output_slots = options.shared_memory_slots;
    kserve.streaming = options.streaming;
    kserve.timeout = client_options.timeout;
    std::vector<ConvServeClient*> callers;
    for (const auto& client : (*pool)->clients()) callers.push_back(client.get());
    absl::StatusOr<std::unique_ptr<KServeRequestSender>> created =
        KServeRequestSender::Create(kserve, input, callers, servers);
    if (!created.ok()) return Annotate("setting up the requests", created.status());
    if (const SharedMemoryTensors* regions = (*created)->regions(); regions != nullptr) {
      log(absl::StrCat("registered ", regions->description(), " regions '",
                       regions->input_region(), "' and '", regions->output_region(), "' on ",
                       servers.size(), servers.size() == 1 ? " server" : " servers",
                       " (removed at exit, also on Ctrl-C)"));
    }
    sender = *std::move(created);
  }
  auto session = std::unique_ptr<LoadSession>(
      new LoadSession(*std::move(pool), std::move(own_servers), std::move(servers),
                      std::move(input), std::move(verifier), options));
  session->sender_ = std::move(sender);
  return session;
}

LoadSession::LoadSession(std::unique_ptr<ServerPool> pool,
                         std::vector<std::unique_ptr<ConvServeClient>> own_servers,
                         std::vector<ConvServeClient*> servers, InferInput input,
                         std::unique_ptr<OutputVerifier> verifier,
                         const LoadSessionOptions& options)
    : pool_(std::move(pool)),
      own_servers_(std::move(own_servers)),
      servers_(std::move(servers)),
      input_(std::move(input)),
      shared_memory_(options.shared_memory),
      streaming_(options.streaming),
      verifier_(std::move(verifier)) {}

void LoadSession::Count(const absl::Status& status, const InferOutput* output) {
  if (status.ok() && output_bytes_.load() == 0) output_bytes_.store(output->byte_size);
  absl::MutexLock lock(&mu_);
  ++totals_.sent;
  if (status.ok()) {
    ++totals_.ok;
    return;
  }
  ++totals_.errors;
  ++totals_.errors_by_code[absl::StatusCodeToString(status.code())];
}

absl::StatusOr<InferOutput> LoadSession::Send() {
  absl::StatusOr<InferOutput> output = sender_->Send(pool_->Next());
  Count(output.status(), output.ok() ? &*output : nullptr);
  return output;
}

void LoadSession::SendAsync(InferRequestSender::Done done) {
  sender_->SendAsync(pool_->Next(),
                     [this, done = std::move(done)](const absl::Status& status, InferOutput* out) {
                       Count(status, out);
                       done(status, out);
                     });
}

void LoadSession::SendBlocking(InferRequestSender::Done done) {
  sender_->SendBlocking(pool_->Next(), [this, &done](const absl::Status& status, InferOutput* out) {
    Count(status, out);
    done(status, out);
  });
}

void LoadSession::Verify(InferOutput* output) {
  if (verifier_ == nullptr) return;
  absl::Status fetched = output->FetchBytes();
  if (!fetched.ok()) {
    verifier_->Unreadable(absl::StrCat("reading the output: ", fetched.ToString()));
    return;
  }
  verifier_->Check(output->bytes);
}

absl::Status LoadSession::Unload() {
  for (ConvServeClient* client : servers_) {
    absl::Status unloaded = client->UnloadGraph(input_.graph);
    if (!unloaded.ok()) return Annotate("UnloadGraph", unloaded);
  }
  return absl::OkStatus();
}

RequestTotals LoadSession::totals() const {
  absl::MutexLock lock(&mu_);
  return totals_;
}

}  // namespace convserve
