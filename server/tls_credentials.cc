#include "server/tls_credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"
#include "spdlog/spdlog.h"

namespace convserve {
namespace {

// One owner per OpenSSL object (STYLE.md: RAII owners for C handles).
struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using PrivateKey = std::unique_ptr<EVP_PKEY, KeyFree>;

absl::StatusOr<Bio> OpenFile(const std::string& path, const char* flag) {
  Bio bio(BIO_new_file(path.c_str(), "r"));
  if (bio == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", flag, " '", path, "'"));
  }
  return bio;
}

absl::StatusOr<Certificate> ReadCertificate(const std::string& path, const char* flag) {
  ASSIGN_OR_RETURN(Bio bio, OpenFile(path, flag));
  Certificate cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' holds no PEM certificate"));
  }
  return cert;
}

absl::Status CheckFiles(const ServerTlsOptions& options) {
  if (options.key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file needs --tls_key_file");
  }
  ASSIGN_OR_RETURN(Certificate cert, ReadCertificate(options.cert_file, "--tls_cert_file"));
  ASSIGN_OR_RETURN(Bio key_bio, OpenFile(options.key_file, "--tls_key_file"));
  PrivateKey key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key_file '", options.key_file,
        "' holds no unencrypted PEM private key (a passphrase-protected key cannot be used)"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("--tls_key_file '", options.key_file,
                                                   "' is not the key of --tls_cert_file '",
                                                   options.cert_file, "'"));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0) {
    spdlog::warn("--tls_cert_file '{}' has expired; clients will refuse it", options.cert_file);
  }
  if (options.require_client_cert && options.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_require_client_cert needs --tls_client_ca_file (the CA that signs client "
        "certificates)");
  }
  if (!options.client_ca_file.empty()) {
    RETURN_IF_ERROR(ReadCertificate(options.client_ca_file, "--tls_client_ca_file").status());
  }
  if (options.reload_interval_seconds < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_reload_interval_seconds must be >= 1, got ", options.reload_interval_seconds));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options) {
  if (!TlsEnabled(options)) {
    if (!options.key_file.empty() || !options.client_ca_file.empty() ||
        options.require_client_cert) {
      return absl::InvalidArgumentError(
          "--tls_key_file, --tls_client_ca_file and --tls_require_client_cert need "
          "--tls_cert_file");
    }
    return grpc::InsecureServerCredentials();
  }
  RETURN_IF_ERROR(CheckFiles(options));
  // gRPC 1.51's SslServerCredentials reads PEM strings once; the TLS
  // credentials with a file-watching provider (same handshake, same OpenSSL)
  // re-read the files, so certificate rotation needs no restart.
  const auto interval = static_cast<unsigned int>(options.reload_interval_seconds);
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider;
  if (options.client_ca_file.empty()) {
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        options.key_file, options.cert_file, interval);
  } else {
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        options.key_file, options.cert_file, options.client_ca_file, interval);
  }
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (options.client_ca_file.empty()) {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    tls.watch_root_certs();
    tls.set_cert_request_type(options.require_client_cert
                                  ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                  : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

}  // namespace convserve
