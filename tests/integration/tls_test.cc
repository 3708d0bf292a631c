// TLS and mutual TLS on the gRPC port, with certificates the openssl CLI makes
// for each run (tests/integration/make_test_certs.sh): TLS serves, plain text
// is refused, a client certificate from another CA or none at all is refused
// when one is required, convserve-health and convserve-load connect with
// their --tls_* flags, and a rotated certificate is served without a restart.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/channel_credentials.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

std::string CertDir() { return ::testing::TempDir() + "/tls_test_certs"; }
std::string Cert(const std::string& name) { return CertDir() + "/" + name; }

std::string ReadText(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// ServerLive over a channel with `tls` (plain text when !tls.enabled).
grpc::Status Live(const std::string& address, const ClientTlsOptions& tls) {
  grpc::ChannelArguments args;
  // A fresh connection per call: no subchannel shared with an earlier try.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = MakeChannelCredentials(tls, &args);
  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateCustomChannel(address, credentials, args));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  inference::ServerLiveResponse response;
  grpc::Status status = stub->ServerLive(&context, {}, &response);
  if (status.ok() && !response.live()) return grpc::Status(grpc::StatusCode::INTERNAL, "not live");
  return status;
}

// TLS trusting CA `ca` ("a" or "b"), with client certificate `client` ("a",
// "b" or "" for none); the certificates name localhost.
ClientTlsOptions Tls(const std::string& ca, const std::string& client = "") {
  ClientTlsOptions tls;
  tls.enabled = true;
  tls.root_certs = ReadText(Cert("ca_" + ca + ".pem"));
  if (!client.empty()) {
    tls.cert_chain = ReadText(Cert("client_" + client + ".pem"));
    tls.private_key = ReadText(Cert("client_" + client + ".key"));
  }
  tls.server_name = "localhost";
  return tls;
}

ServerTlsOptions ServerTls(bool require_client_cert) {
  ServerTlsOptions tls;
  tls.cert_file = Cert("server_a.pem");
  tls.key_file = Cert("server_a.key");
  if (require_client_cert) {
    tls.client_ca_file = Cert("ca_a.pem");
    tls.require_client_cert = true;
  }
  return tls;
}

std::unique_ptr<TestServer> StartServer(const ServerTlsOptions& tls) {
  TestServerOptions options;
  options.tls = tls;
  absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::TryStart({}, options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// Runs a shell command line; its exit status, output in `output`.
int RunShell(const std::string& command, std::string* output) {
  const std::string log = ::testing::TempDir() + "/tls_test_command.log";
  const int status = std::system((command + " > " + log + " 2>&1").c_str());
  *output = ReadText(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::filesystem::remove_all(CertDir());
    std::string output;
    const int code = RunShell(absl::StrCat("bash ", CONVSERVE_SOURCE_DIR,
                                      "/tests/integration/make_test_certs.sh ", CertDir()),
                         &output);
    ASSERT_EQ(code, 0) << "openssl could not make the test certificates:\n" << output;
  }
};

TEST_F(TlsTest, ServesTlsAndRefusesPlainText) {
  std::unique_ptr<TestServer> server = StartServer(ServerTls(false));
  ASSERT_NE(server, nullptr);
  const grpc::Status tls = Live(server->address(), Tls("a"));
  EXPECT_TRUE(tls.ok()) << tls.error_message();
  const grpc::Status plain = Live(server->address(), ClientTlsOptions());
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  // A client that does not trust the server's CA refuses the server.
  EXPECT_EQ(Live(server->address(), Tls("b")).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, MutualTlsRefusesAMissingOrForeignClientCertificate) {
  std::unique_ptr<TestServer> server = StartServer(ServerTls(true));
  ASSERT_NE(server, nullptr);
  const grpc::Status signed_by_ca = Live(server->address(), Tls("a", "a"));
  EXPECT_TRUE(signed_by_ca.ok()) << signed_by_ca.error_message();
  const grpc::Status foreign = Live(server->address(), Tls("a", "b"));
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::UNAVAILABLE) << foreign.error_message();
  const grpc::Status missing = Live(server->address(), Tls("a"));
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAVAILABLE) << missing.error_message();
  EXPECT_EQ(Live(server->address(), ClientTlsOptions()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, OptionalClientCertificateMustStillVerify) {
  ServerTlsOptions options = ServerTls(false);
  options.client_ca_file = Cert("ca_a.pem");
  std::unique_ptr<TestServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(Live(server->address(), Tls("a")).ok());
  EXPECT_TRUE(Live(server->address(), Tls("a", "a")).ok());
  EXPECT_EQ(Live(server->address(), Tls("a", "b")).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, BadFilesStopTheStartWithTheFlagNamed) {
  TestServerOptions options;
  options.tls = ServerTls(false);
  options.tls.key_file = Cert("server_b.key");
  absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::TryStart({}, options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("is not the key of --tls_cert_file"));

  options.tls = ServerTls(false);
  options.tls.require_client_cert = true;
  EXPECT_THAT(TestServer::TryStart({}, options).status().message(),
              HasSubstr("--tls_require_client_cert needs --tls_client_ca_file"));

  options.tls = ServerTls(false);
  options.tls.cert_file = Cert("server_a.key");
  EXPECT_THAT(TestServer::TryStart({}, options).status().message(),
              HasSubstr("holds no PEM certificate"));

  options.tls = ServerTls(false);
  options.tls.key_file = Cert("no_such.key");
  EXPECT_THAT(TestServer::TryStart({}, options).status().message(),
              HasSubstr("cannot read --tls_key_file"));
}

TEST_F(TlsTest, HealthProbeAndLoadGeneratorConnectWithTheirTlsFlags) {
  std::unique_ptr<TestServer> server = StartServer(ServerTls(true));
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();
  const std::string client_a = absl::StrCat(" --tls_ca_file=", Cert("ca_a.pem"),
                                            " --tls_cert_file=", Cert("client_a.pem"),
                                            " --tls_key_file=", Cert("client_a.key"),
                                            " --tls_server_name=localhost");
  std::string output;
  EXPECT_EQ(
      RunShell(absl::StrCat(CONVSERVE_HEALTH_BINARY, " --server=", address, client_a), &output), 0)
      << output;
  EXPECT_THAT(output, HasSubstr("SERVING"));
  EXPECT_EQ(RunShell(absl::StrCat(CONVSERVE_HEALTH_BINARY, " --server=", address), &output), 1)
      << output;
  EXPECT_EQ(RunShell(absl::StrCat(CONVSERVE_HEALTH_BINARY, " --server=", address,
                             " --tls_ca_file=", Cert("ca_a.pem"), " --tls_server_name=localhost"),
                &output),
            1)
      << "no client certificate: " << output;

  const std::string load =
      absl::StrCat(CONVSERVE_LOAD_BINARY, " --server=", address, " --graph_file=",
                   CONVSERVE_SOURCE_DIR, "/deploy/examples/resnet_block.textproto",
                   " --input_shape=1,3,16,16 --requests=2 --verify --unload");
  EXPECT_EQ(RunShell(load + client_a, &output), 0) << output;
  EXPECT_NE(RunShell(load, &output), 0) << "plain text reached a TLS server: " << output;
}

TEST_F(TlsTest, RotatedCertificateIsServedWithoutARestart) {
  const std::string live_dir = ::testing::TempDir() + "/tls_test_rotation";
  std::filesystem::remove_all(live_dir);
  std::filesystem::create_directories(live_dir);
  std::filesystem::copy_file(Cert("server_a.pem"), live_dir + "/tls.crt");
  std::filesystem::copy_file(Cert("server_a.key"), live_dir + "/tls.key");
  ServerTlsOptions options;
  options.cert_file = live_dir + "/tls.crt";
  options.key_file = live_dir + "/tls.key";
  options.reload_interval_seconds = 1;
  std::unique_ptr<TestServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(Live(server->address(), Tls("a")).ok());
  ASSERT_FALSE(Live(server->address(), Tls("b")).ok());

  // Swap in CA b's certificate the way a Secret volume does: new files
  // renamed over the old ones.
  std::filesystem::copy_file(Cert("server_b.pem"), live_dir + "/tls.crt.new");
  std::filesystem::copy_file(Cert("server_b.key"), live_dir + "/tls.key.new");
  std::filesystem::rename(live_dir + "/tls.key.new", live_dir + "/tls.key");
  std::filesystem::rename(live_dir + "/tls.crt.new", live_dir + "/tls.crt");
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  grpc::Status rotated = Live(server->address(), Tls("b"));
  while (!rotated.ok() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    rotated = Live(server->address(), Tls("b"));
  }
  EXPECT_TRUE(rotated.ok()) << "the new certificate was not served within 30 s: "
                            << rotated.error_message();
  EXPECT_FALSE(Live(server->address(), Tls("a")).ok()) << "the old certificate is still served";
}

}  // namespace
}  // namespace convserve
