// The servers one client run talks to, from a --server value:
// - "host1:port,host2:port": one channel per address; Next() hands them out
//   round-robin, one request each, so every server gets an even share.
// - a resolver target ("dns:///name:port", "ipv4:a:p,b:p", "unix:..."): one
//   channel with gRPC's round_robin policy, which spreads calls over every
//   address the name resolves to (e.g. the pods behind a headless Service).
// With `connections` > 1, each of those channels exists that many times,
// each with a TCP connection of its own, and Next() takes turns over all of
// them: one HTTP/2 connection is read and written by one thread at a time
// on each side, which caps a busy client near 20,000 small calls a second.
// Thread-safe.
#ifndef CONVSERVE_CLIENT_SERVER_POOL_H_
#define CONVSERVE_CLIENT_SERVER_POOL_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/convserve_client.h"

namespace convserve {

class ServerPool {
 public:
  // `base` supplies message size and deadline; its address is ignored.
  // INVALID_ARGUMENT for an empty list or an empty entry.
  // INVALID_ARGUMENT also for connections < 1.
  static absl::StatusOr<std::unique_ptr<ServerPool>> Create(const std::string& servers,
                                                            const ClientOptions& base = {},
                                                            int connections = 1);

  // The client for the next request (round-robin over the channels).
  ConvServeClient& Next();
  // One client per channel: the servers' in the order given, then each
  // further connection's in the same order.
  const std::vector<std::unique_ptr<ConvServeClient>>& clients() const { return clients_; }
  // One client per entry of the list (the balanced channel's first), for
  // admin calls (LoadGraph goes to each server once).
  std::vector<ConvServeClient*> servers() const;
  // The channels' targets, for reports.
  std::vector<std::string> targets() const;
  // True when the one channel balances over a resolved name (round_robin).
  bool balanced() const { return balanced_; }

  // Every server behind the pool as its own host:port target: the list's
  // entries, or what a resolver target's name resolves to now (so a graph
  // can be loaded on each; a balanced channel's LoadGraph reaches only one).
  absl::StatusOr<std::vector<std::string>> ResolveServers() const;

 private:
  ServerPool(std::vector<std::unique_ptr<ConvServeClient>> clients, size_t servers, bool balanced)
      : clients_(std::move(clients)), servers_(servers), balanced_(balanced) {}

  const std::vector<std::unique_ptr<ConvServeClient>> clients_;
  const size_t servers_;  // the first servers_ clients are one per entry
  const bool balanced_;
  std::atomic<uint64_t> next_{0};
};

// True for targets gRPC resolves itself: "scheme:///..." and the ipv4:,
// ipv6:, unix: and unix-abstract: forms.
bool IsResolverTarget(const std::string& target);

// The addresses of a resolver target as host:port strings: the entries of
// "ipv4:a:p,b:p" / "ipv6:[a]:p,...", the A and AAAA records of
// "dns:[//authority/]host:port" (looked up with getaddrinfo). Other schemes
// (unix:) come back whole. INVALID_ARGUMENT for a malformed target,
// NOT_FOUND when a name does not resolve.
absl::StatusOr<std::vector<std::string>> ResolveTarget(const std::string& target);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_SERVER_POOL_H_
