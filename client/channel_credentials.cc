#include "client/channel_credentials.h"

#include <grpc/grpc.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

absl::StatusOr<std::string> ReadText(const std::string& path, const char* flag) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read ", flag, " '", path, "'"));
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<ClientTlsOptions> ClientTlsFromFiles(bool tls, const std::string& ca_file,
                                                    const std::string& cert_file,
                                                    const std::string& key_file,
                                                    const std::string& server_name) {
  ClientTlsOptions options;
  options.enabled = tls || !ca_file.empty() || !cert_file.empty() || !key_file.empty();
  options.server_name = server_name;
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together (the client certificate and its key)");
  }
  if (!ca_file.empty()) {
    absl::StatusOr<std::string> text = ReadText(ca_file, "--tls_ca_file");
    if (!text.ok()) return text.status();
    options.root_certs = *std::move(text);
  }
  if (!cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadText(cert_file, "--tls_cert_file");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadText(key_file, "--tls_key_file");
    if (!key.ok()) return key.status();
    options.cert_chain = *std::move(cert);
    options.private_key = *std::move(key);
  }
  return options;
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const ClientTlsOptions& options,
                                                                 grpc::ChannelArguments* args) {
  if (!options.enabled) return grpc::InsecureChannelCredentials();
  if (!options.server_name.empty()) {
    args->SetString(GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, options.server_name);
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options.root_certs;
  ssl.pem_cert_chain = options.cert_chain;
  ssl.pem_private_key = options.private_key;
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadText(path, "--graph_management_token_file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--graph_management_token_file '", path, "' is empty"));
  }
  return token;
}

}  // namespace convserve
