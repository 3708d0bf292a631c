// Who may change the loaded graphs over gRPC: convserve.v1 LoadGraph and
// UnloadGraph, KServe RepositoryModelLoad and RepositoryModelUnload. Inference
// and the read-only calls are never affected. Thread-safe.
#ifndef CONVSERVE_SERVER_GRAPH_MANAGEMENT_POLICY_H_
#define CONVSERVE_SERVER_GRAPH_MANAGEMENT_POLICY_H_

#include <grpcpp/support/string_ref.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace convserve {

enum class GraphManagementMode {
  kOpen,   // any caller who reaches the port
  kToken,  // callers sending `authorization: Bearer <token>`
  kOff,    // nobody: the graphs are those of --graph_dir
};

// "open", "token" or "off"; INVALID_ARGUMENT names the flag otherwise.
absl::StatusOr<GraphManagementMode> ParseGraphManagementMode(absl::string_view name);
const char* GraphManagementModeName(GraphManagementMode mode);

struct GraphManagementOptions {
  // Which callers may load and unload graphs.
  GraphManagementMode mode = GraphManagementMode::kOpen;
  // kToken: file whose content (surrounding whitespace removed) is the token.
  std::string token_file;
};

class GraphManagementPolicy {
 public:
  using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;
  // Told of every refusal: the call's name and why ("disabled",
  // "missing_token" or "wrong_token"), for the refusal metric.
  using RefusalObserver = std::function<void(absl::string_view rpc, absl::string_view reason)>;

  // Reads the token file in token mode: NOT_FOUND when it cannot be read,
  // INVALID_ARGUMENT when it holds no token. `on_refusal` may be null.
  static absl::StatusOr<std::unique_ptr<GraphManagementPolicy>> Create(
      const GraphManagementOptions& options, RefusalObserver on_refusal);

  // OK when a call `rpc` with the client's `metadata` may change the graphs;
  // PERMISSION_DENIED when management is off, UNAUTHENTICATED when the token
  // is missing or wrong. Tokens are compared in constant time (digests of
  // both, then CRYPTO_memcmp), so the time taken says nothing about how much
  // of a guess was right.
  absl::Status Authorize(const Metadata& metadata, absl::string_view rpc) const;

  // Token mode: reads the token file again (SIGHUP). On error the old token
  // stays in force.
  absl::Status ReloadToken();

  GraphManagementMode mode() const { return options_.mode; }

 private:
  GraphManagementPolicy(const GraphManagementOptions& options, RefusalObserver on_refusal)
      : options_(options), on_refusal_(std::move(on_refusal)) {}
  // The decision, before the observer hears of a refusal.
  absl::Status Decide(const Metadata& metadata, absl::string_view rpc, const char** reason) const;

  const GraphManagementOptions options_;
  const RefusalObserver on_refusal_;
  mutable absl::Mutex mu_;
  // SHA-256 of the token; equal-length digests make the comparison's time
  // independent of the token's length too.
  std::string token_digest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_GRAPH_MANAGEMENT_POLICY_H_
