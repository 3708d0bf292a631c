// TLS and mutual TLS for the gRPC port: the server's credentials from PEM
// files, checked at start and re-read while serving so rotated certificates
// take effect without a restart.
#ifndef CONVSERVE_SERVER_TLS_CREDENTIALS_H_
#define CONVSERVE_SERVER_TLS_CREDENTIALS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace convserve {

struct ServerTlsOptions {
  // PEM certificate chain of the server; empty serves plain text.
  std::string cert_file;
  // PEM private key of that certificate (unencrypted).
  std::string key_file;
  // PEM CA certificates that sign client certificates; empty asks clients
  // for none. Set alone, a client may come without a certificate, but one it
  // sends must verify.
  std::string client_ca_file;
  // Refuse clients without a certificate signed by `client_ca_file` (mTLS).
  bool require_client_cert = false;
  // How often the files are checked for changes; a changed file is used for
  // new connections (gRPC's FileWatcherCertificateProvider).
  int reload_interval_seconds = 60;
};

// True when `options` asks for TLS.
inline bool TlsEnabled(const ServerTlsOptions& options) { return !options.cert_file.empty(); }

// Insecure credentials when TLS is not asked for. Otherwise checks the files
// first (each readable and PEM, the key matching the certificate, a client
// CA when client certificates are required), so a mistake stops the start
// with INVALID_ARGUMENT naming the flag and file rather than failing every
// handshake later.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options);

}  // namespace convserve

#endif  // CONVSERVE_SERVER_TLS_CREDENTIALS_H_
