#include "server/graph_management_policy.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

constexpr absl::string_view kBearer = "Bearer ";

std::string Sha256(absl::string_view text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "--graph_management=token needs --graph_management_token_file");
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the graph management token file '", path, "'"));
  }
  std::stringstream text;
  text << file.rdbuf();
  const std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the graph management token file '", path,
                                                   "' is empty; put the token in it"));
  }
  return token;
}

}  // namespace

absl::StatusOr<GraphManagementMode> ParseGraphManagementMode(absl::string_view name) {
  if (name == "open") return GraphManagementMode::kOpen;
  if (name == "token") return GraphManagementMode::kToken;
  if (name == "off") return GraphManagementMode::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("--graph_management '", name, "' is not open, token or off"));
}

const char* GraphManagementModeName(GraphManagementMode mode) {
  switch (mode) {
    case GraphManagementMode::kOpen:
      return "open";
    case GraphManagementMode::kToken:
      return "token";
    case GraphManagementMode::kOff:
      return "off";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<GraphManagementPolicy>> GraphManagementPolicy::Create(
    const GraphManagementOptions& options, RefusalObserver on_refusal) {
  std::unique_ptr<GraphManagementPolicy> policy(
      new GraphManagementPolicy(options, std::move(on_refusal)));
  if (options.mode == GraphManagementMode::kToken) {
    absl::Status read = policy->ReloadToken();
    if (!read.ok()) return read;
  }
  return policy;
}

absl::Status GraphManagementPolicy::ReloadToken() {
  if (options_.mode != GraphManagementMode::kToken) return absl::OkStatus();
  absl::StatusOr<std::string> token = ReadToken(options_.token_file);
  if (!token.ok()) return token.status();
  absl::MutexLock lock(&mu_);
  token_digest_ = Sha256(*token);
  return absl::OkStatus();
}

absl::Status GraphManagementPolicy::Authorize(const Metadata& metadata,
                                             absl::string_view rpc) const {
  const char* reason = "";
  absl::Status status = Decide(metadata, rpc, &reason);
  if (!status.ok() && on_refusal_) on_refusal_(rpc, reason);
  return status;
}

absl::Status GraphManagementPolicy::Decide(const Metadata& metadata, absl::string_view rpc,
                                           const char** reason) const {
  switch (options_.mode) {
    case GraphManagementMode::kOpen:
      return absl::OkStatus();
    case GraphManagementMode::kOff:
      *reason = "disabled";
      return absl::PermissionDeniedError(absl::StrCat(
                        rpc, " is disabled: this server runs with --graph_management=off and "
                             "serves the graphs of its --graph_dir; change the graphs there "
                             "and restart it"));
    case GraphManagementMode::kToken:
      break;
  }
  const auto header = metadata.find("authorization");
  if (header == metadata.end()) {
    *reason = "missing_token";
    return absl::UnauthenticatedError(absl::StrCat(
        rpc, " needs the graph management token: send the metadata "
             "'authorization: Bearer <token>' (the server's --graph_management_token_file)"));
  }
  const absl::string_view value(header->second.data(), header->second.size());
  if (!absl::StartsWith(value, kBearer)) {
    *reason = "missing_token";
    return absl::UnauthenticatedError(
        absl::StrCat(rpc, ": the authorization metadata is not 'Bearer <token>'"));
  }
  const std::string digest = Sha256(value.substr(kBearer.size()));
  bool equal;
  {
    absl::MutexLock lock(&mu_);
    equal = CRYPTO_memcmp(digest.data(), token_digest_.data(), digest.size()) == 0;
  }
  if (!equal) {
    *reason = "wrong_token";
    return absl::UnauthenticatedError(
        absl::StrCat(rpc, ": the bearer token is not the graph management token"));
  }
  return absl::OkStatus();
}

}  // namespace convserve
