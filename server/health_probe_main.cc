// convserve-health: asks a server's grpc.health.v1.Health/Check once (or until
// it answers SERVING, with --wait_seconds) and exits 0 when it is SERVING, 1
// otherwise (2 for unusable flags). Made for container HEALTHCHECKs and scripts, so the runtime image
// needs no Python or grpcurl.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/channel_credentials.h"
#include "grpc/health/v1/health.grpc.pb.h"

ABSL_FLAG(std::string, server, "localhost:8001", "server address host:port");
ABSL_FLAG(std::string, service, "",
          "service to ask about; empty means the server as a whole, which turns NOT_SERVING "
          "when it starts to drain");
ABSL_FLAG(double, timeout_seconds, 2, "deadline of each Check call");
ABSL_FLAG(double, wait_seconds, 0,
          "keep asking (every 200 ms) until SERVING or this many seconds have passed; 0 asks once");
ABSL_FLAG(bool, quiet, false, "print nothing; the exit code says it all");
ABSL_FLAG(bool, tls, false,
          "connect with TLS (implied by the --tls_* files); the server's certificate must chain "
          "to --tls_ca_file, or to the system's roots without it");
ABSL_FLAG(std::string, tls_ca_file, "", "PEM CA certificate(s) that sign the server's certificate");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate, for a server that requires one (mTLS); with --tls_key_file");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_server_name, "",
          "name to check the server's certificate against instead of --server's host");

namespace convserve {
namespace {

// How often a waiting probe asks again (--wait_seconds).
constexpr int kRetryMs = 200;

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Check call; the text is what a person reads when the probe fails.
bool CheckOnce(Health::Stub& stub, const std::string& service, double timeout_seconds,
               std::string* text) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  const grpc::Status status = stub.Check(&context, request, &response);
  if (!status.ok()) {
    // gRPC and absl share the canonical status codes.
    *text = absl::StrCat("no answer: ",
                         absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                         ": ", status.error_message());
    return false;
  }
  *text = HealthCheckResponse::ServingStatus_Name(response.status());
  return response.status() == HealthCheckResponse::SERVING;
}

int Run() {
  const std::string address = absl::GetFlag(FLAGS_server);
  const std::string service = absl::GetFlag(FLAGS_service);
  const double timeout_seconds = absl::GetFlag(FLAGS_timeout_seconds);
  const absl::StatusOr<ClientTlsOptions> tls = ClientTlsFromFiles(
      absl::GetFlag(FLAGS_tls), absl::GetFlag(FLAGS_tls_ca_file), absl::GetFlag(FLAGS_tls_cert_file),
      absl::GetFlag(FLAGS_tls_key_file), absl::GetFlag(FLAGS_tls_server_name));
  if (!tls.ok()) {
    std::fprintf(stderr, "convserve-health: %s\n", tls.status().ToString().c_str());
    return 2;
  }
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(
                           static_cast<int64_t>(absl::GetFlag(FLAGS_wait_seconds) * 1000));
  // A fresh channel for every try: after a refused connection a channel (and
  // every channel sharing gRPC's global subchannel pool) waits out a
  // reconnect backoff of 1 s and more, so a probe waiting for a server that
  // is starting saw SERVING about 4 s late.
  const auto check = [&](std::string* text) {
    grpc::ChannelArguments channel_args;
    channel_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    std::shared_ptr<grpc::ChannelCredentials> credentials =
        MakeChannelCredentials(*tls, &channel_args);
    auto stub = Health::NewStub(grpc::CreateCustomChannel(address, credentials, channel_args));
    return CheckOnce(*stub, service, timeout_seconds, text);
  };
  std::string text;
  bool serving = check(&text);
  while (!serving && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kRetryMs));
    serving = check(&text);
  }
  if (!absl::GetFlag(FLAGS_quiet)) {
    std::printf("%s%s%s: %s\n", address.c_str(), service.empty() ? "" : " service ",
                service.c_str(), text.c_str());
  }
  return serving ? 0 : 1;
}

}  // namespace
}  // namespace convserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "convserve-health: exit 0 when the server's gRPC health check says SERVING, else 1.\n"
      "  convserve-health --server=localhost:8001 [--wait_seconds=30]");
  // --help lists the flags of the file that defines them; absl's default
  // looks for a file named after the binary (convserve-x.cc) and finds none.
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/health_probe_main.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::ParseCommandLine(argc, argv);
  return convserve::Run();
}
