// The setup every convserve-load run shares: the servers, the graph (loaded
// from a file on every server, or one already loaded), the input tensor, the
// optional CPU reference for --verify, and counters of every request sent.
// Thread-safe after Create.
#ifndef CONVSERVE_CLIENT_LOAD_SESSION_H_
#define CONVSERVE_CLIENT_LOAD_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/channel_credentials.h"
#include "client/infer_request_sender.h"
#include "client/output_verifier.h"
#include "client/server_pool.h"
#include "client/shared_memory_tensors.h"
#include "engine/runtime/warmup_shapes.h"

namespace convserve {

// What --warmup_shapes asks of the server's warm-up at load.
enum class LoadWarmup {
  // The shape this run sends (its first request then builds no plan).
  kInput,
  // LoadGraph names none: the server's --warmup_shapes decide.
  kServer,
  // No warm-up, not even the server's.
  kNone,
  // The sizes in LoadSessionOptions::warmup_sizes.
  kList,
};

// Parses --warmup_shapes: input, server, none, or N:HxW entries
// (engine/runtime/warmup_shapes.h) into `sizes`.
absl::StatusOr<LoadWarmup> ParseLoadWarmup(const std::string& text,
                                           std::vector<WarmupSize>* sizes);

// --connections=0: one connection per 16 requests in flight at most, up to
// 8 (a connection serves about 20,000 small calls a second).
int AutoConnections(int most_in_flight);

struct LoadSessionOptions {
  // --server: host:port[,host:port...] or a resolver target (server_pool.h).
  std::string servers = "localhost:8001";
  // Connections to each server (channels with a connection of their
  // own); requests take turns over them (server_pool.h).
  int connections = 1;
  // Exactly one of: a graph file to load on every server, or the name or id
  // of a graph already loaded.
  std::string graph_file;
  std::string graph;
  // Weights and (when fill_bias) biases the file leaves empty come from seed.
  uint64_t seed = 1;
  bool fill_bias = true;
  // Logical N, C, spatial...; empty means 1, C, 32, 32(, 32).
  std::vector<int64_t> input_shape;
  // When > 0, replaces N of the input shape.
  int64_t batch = 0;
  // Warm-up at load of the graph file's graph (LoadGraph waits for it).
  LoadWarmup warmup = LoadWarmup::kInput;
  // kList: N and spatial dims of each shape, C the graph's.
  std::vector<WarmupSize> warmup_sizes;
  // Random input from this seed, unless input_file names raw bytes.
  uint64_t input_seed = 7;
  std::string input_file;
  // Wire protocol of the inference calls.
  Protocol protocol = Protocol::kConvServe;
  // KServe only: tensors in shared memory instead of the messages.
  SharedMemoryKind shared_memory = SharedMemoryKind::kNone;
  // --shared_memory=cuda: the GPU holding the regions.
  int cuda_device = 0;
  // With shared memory: output slots, the most requests in flight at once
  // (more wait for a slot; kserve_request_sender.h).
  int shared_memory_slots = 64;
  // KServe only: one ModelStreamInfer stream per connection (`connections`)
  // instead of unary calls.
  bool streaming = false;
  // Deadline of each call.
  absl::Duration timeout = absl::Seconds(30);
  // Wait this long for every server's ServerLive first (0: no wait).
  absl::Duration wait_for_server = absl::ZeroDuration();
  // Build the CPU reference for output checks (needs graph_file).
  bool verify = false;
  // TLS or mutual TLS to every server.
  ClientTlsOptions tls;
  // Sent with LoadGraph and UnloadGraph; empty for none.
  std::string graph_management_token;
};

// Every inference request of the session, probe and load alike.
struct RequestTotals {
  int64_t sent = 0;
  int64_t ok = 0;
  int64_t errors = 0;
  // Status code name ("UNAVAILABLE") -> count.
  std::map<std::string, int64_t> errors_by_code;
};

class LoadSession {
 public:
  // `log` receives the lines a user sees about the setup ("loaded graph ...").
  static absl::StatusOr<std::unique_ptr<LoadSession>> Create(
      const LoadSessionOptions& options, const std::function<void(const std::string&)>& log);

  // Sends the request once (blocking) to the next server.
  absl::StatusOr<InferOutput> Send();
  // Sends it without blocking; see InferRequestSender::SendAsync.
  void SendAsync(InferRequestSender::Done done);
  // Sends it on the calling thread; see InferRequestSender::SendBlocking.
  void SendBlocking(InferRequestSender::Done done);
  // With a verifier: reads the output's bytes if they are still in shared
  // memory and checks them (a failed read counts as a mismatch).
  void Verify(InferOutput* output);

  // Unloads the graph from every server.
  absl::Status Unload();

  const InferInput& input() const { return input_; }
  int64_t batch() const { return input_.shape.empty() ? 1 : input_.shape[0]; }
  // Output bytes of the first successful response (0 before one).
  int64_t output_bytes() const { return output_bytes_.load(); }
  // Null unless options.verify.
  OutputVerifier* verifier() const { return verifier_.get(); }
  const ServerPool& pool() const { return *pool_; }
  // One client per server that has the graph, for admin calls and
  // statistics: the pool's clients, or for a balanced target one channel per
  // address it resolved to. Owned by the pool or the session.
  const std::vector<ConvServeClient*>& servers() const { return servers_; }
  Protocol protocol() const { return sender_->protocol(); }
  // How requests and tensors travel (InferRequestSender::transport).
  std::string transport() const { return sender_->transport(); }
  SharedMemoryKind shared_memory() const { return shared_memory_; }
  bool streaming() const { return streaming_; }
  RequestTotals totals() const;

 private:
  LoadSession(std::unique_ptr<ServerPool> pool,
              std::vector<std::unique_ptr<ConvServeClient>> own_servers,
              std::vector<ConvServeClient*> servers, InferInput input,
              std::unique_ptr<OutputVerifier> verifier, const LoadSessionOptions& options);

  void Count(const absl::Status& status, const InferOutput* output);

  const std::unique_ptr<ServerPool> pool_;
  // Channels of single servers behind a balanced target (see servers()).
  const std::vector<std::unique_ptr<ConvServeClient>> own_servers_;
  const std::vector<ConvServeClient*> servers_;
  const InferInput input_;
  const SharedMemoryKind shared_memory_;
  const bool streaming_;
  const std::unique_ptr<OutputVerifier> verifier_;
  std::atomic<int64_t> output_bytes_{0};
  mutable absl::Mutex mu_;
  RequestTotals totals_ ABSL_GUARDED_BY(mu_);
  // Declared last, so it goes first: its shared memory is unregistered
  // through the clients above, and requests it still completes while its
  // streams close are counted.
  std::unique_ptr<InferRequestSender> sender_;
};

// "1,3,224,224" -> dims; INVALID_ARGUMENT names the flag.
absl::StatusOr<std::vector<int64_t>> ParseShape(const std::string& text);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_LOAD_SESSION_H_
