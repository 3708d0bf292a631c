// How a client reaches a server over TLS or mutual TLS: gRPC channel
// credentials from PEM files, shared by convserve-load, convserve-health and
// the client library.
#ifndef CONVSERVE_CLIENT_CHANNEL_CREDENTIALS_H_
#define CONVSERVE_CLIENT_CHANNEL_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace convserve {

struct ClientTlsOptions {
  // Connect with TLS; false is plain text.
  bool enabled = false;
  // PEM CA certificates the server's certificate must chain to; empty: the
  // system's trusted roots.
  std::string root_certs;
  // PEM certificate chain and key presented to a server that asks (mTLS);
  // empty for none.
  std::string cert_chain;
  std::string private_key;
  // Host name checked against the server's certificate instead of the one
  // in the address (e.g. when connecting by IP); empty for none.
  std::string server_name;
};

// The options from files (each empty for none); TLS is on when `tls` is
// true or any file is given. NOT_FOUND names the file that cannot be read;
// INVALID_ARGUMENT when only one of the certificate and its key is given.
absl::StatusOr<ClientTlsOptions> ClientTlsFromFiles(bool tls, const std::string& ca_file,
                                                    const std::string& cert_file,
                                                    const std::string& key_file,
                                                    const std::string& server_name);

// Credentials for a channel, adding the server name override to `args`.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const ClientTlsOptions& options,
                                                                 grpc::ChannelArguments* args);

// The graph management token of `path` (surrounding whitespace removed);
// NOT_FOUND when unreadable, INVALID_ARGUMENT when empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_CHANNEL_CREDENTIALS_H_
