#include "client/server_pool.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace convserve {

namespace {

// "host:port" or "[v6]:port" -> host and port.
absl::Status SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  size_t colon;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("'", address, "' lacks a closing ]"));
    }
    *host = address.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = address.rfind(':');
    *host = address.substr(0, colon);
  }
  if (colon == std::string::npos || colon >= address.size() || address[colon] != ':' ||
      colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' lacks a port (give host:port)"));
  }
  *port = address.substr(colon + 1);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ResolveDns(const std::string& name) {
  std::string host, port;
  absl::Status split = SplitHostPort(name, &host, &port);
  if (!split.ok()) return split;
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (error != 0) {
    return absl::NotFoundError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(error)));
  }
  std::vector<std::string> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) !=
        0) {
      continue;
    }
    const std::string address = a->ai_family == AF_INET6 ? absl::StrCat("[", text, "]:", port)
                                                         : absl::StrCat(text, ":", port);
    if (std::find(addresses.begin(), addresses.end(), address) == addresses.end()) {
      addresses.push_back(address);
    }
  }
  freeaddrinfo(found);
  return addresses;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveTarget(const std::string& target) {
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (!absl::StartsWith(target, scheme)) continue;
    std::vector<std::string> addresses;
    for (absl::string_view part :
         absl::StrSplit(absl::string_view(target).substr(5), ',', absl::SkipEmpty())) {
      addresses.emplace_back(absl::StripPrefix(part, "//"));
    }
    return addresses;
  }
  if (absl::StartsWith(target, "dns:")) {
    absl::string_view name = absl::string_view(target).substr(4);
    if (absl::ConsumePrefix(&name, "//")) {
      // dns://authority/host:port: the authority names a DNS server; the
      // system resolver is used here.
      const size_t slash = name.find('/');
      if (slash == absl::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", target, "': expected dns:///host:port"));
      }
      name.remove_prefix(slash + 1);
    }
    return ResolveDns(std::string(name));
  }
  return std::vector<std::string>{target};
}

bool IsResolverTarget(const std::string& target) {
  if (absl::StrContains(target, ":///")) return true;
  for (const char* scheme : {"ipv4:", "ipv6:", "unix:", "unix-abstract:"}) {
    if (absl::StartsWith(target, scheme)) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<ServerPool>> ServerPool::Create(const std::string& servers,
                                                               const ClientOptions& base,
                                                               int connections) {
  const std::string trimmed(absl::StripAsciiWhitespace(servers));
  if (trimmed.empty()) return absl::InvalidArgumentError("--server is empty");
  if (connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--connections is ", connections, "; give 1 or more"));
  }
  std::vector<ClientOptions> entries;
  const bool balanced = IsResolverTarget(trimmed);
  if (balanced) {
    // The comma in "ipv4:a:p,b:p" belongs to the target: gRPC splits it.
    ClientOptions options = base;
    options.address = trimmed;
    options.load_balancing_policy = "round_robin";
    entries.push_back(options);
  } else {
    for (absl::string_view part : absl::StrSplit(trimmed, ',')) {
      const std::string address(absl::StripAsciiWhitespace(part));
      if (address.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--server '", servers, "' has an empty entry; give host:port,host:port"));
      }
      ClientOptions options = base;
      options.address = address;
      entries.push_back(options);
    }
  }
  std::vector<std::unique_ptr<ConvServeClient>> clients;
  for (int connection = 0; connection < connections; ++connection) {
    for (ClientOptions options : entries) {
      options.own_connection = connections > 1;
      clients.push_back(std::make_unique<ConvServeClient>(options));
    }
  }
  return std::unique_ptr<ServerPool>(new ServerPool(std::move(clients), entries.size(), balanced));
}

std::vector<ConvServeClient*> ServerPool::servers() const {
  std::vector<ConvServeClient*> servers;
  for (size_t i = 0; i < servers_; ++i) servers.push_back(clients_[i].get());
  return servers;
}

ConvServeClient& ServerPool::Next() {
  return *clients_[next_.fetch_add(1, std::memory_order_relaxed) % clients_.size()];
}

absl::StatusOr<std::vector<std::string>> ServerPool::ResolveServers() const {
  if (!balanced_) return targets();
  return ResolveTarget(clients_.front()->options().address);
}

std::vector<std::string> ServerPool::targets() const {
  std::vector<std::string> targets;
  for (const ConvServeClient* client : servers()) targets.push_back(client->options().address);
  return targets;
}

}  // namespace convserve
