// SIGTERM to a real convserve-server while 8 clients send requests: every
// request gets its correct output or UNAVAILABLE (refused while draining),
// nothing is lost or partial, and the server exits 0. The backend is cpu, or
// what CONVSERVE_TEST_BACKEND says (the GPU check runs it with cuda).
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/convserve_client.h"
#include "gtest/gtest.h"
#include "tests/runtime/traffic_graphs.h"

namespace convserve {
namespace {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

TEST(SigtermDuringTrafficTest, AcceptedRequestsFinishAndServerExitsZero) {
  const char* backend_env = std::getenv("CONVSERVE_TEST_BACKEND");
  const std::string backend = backend_env != nullptr ? backend_env : "cpu";
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  const std::string listen_flag = "--listen=" + address;
  const std::string backend_flag = "--backend=" + backend;
  const std::string log_path =
      absl::StrCat(::testing::TempDir(), "sigterm_server_", getpid(), ".log");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    freopen(log_path.c_str(), "w", stdout);  // spdlog writes to stdout
    // A bundle run elsewhere says where the binary is now.
    const char* binary = std::getenv("CONVSERVE_SERVER_BINARY");
    // No /metrics: the default port (8002) is shared by every server on the
    // machine, and a concurrent test's server holding it failed this start.
    execl(binary != nullptr ? binary : CONVSERVE_SERVER_BINARY, "convserve-server", listen_flag.c_str(), backend_flag.c_str(),
          "--metrics_listen=", static_cast<char*>(nullptr));
    _exit(127);
  }
  ClientOptions options;
  options.address = address;
  ConvServeClient admin(options);
  bool live = false;
  for (int i = 0; i < 200 && !live; ++i) {  // up to 20 s for the server to start
    absl::StatusOr<bool> answer = admin.ServerLive();
    live = answer.ok() && *answer;
    if (!live) usleep(100 * 1000);
  }
  ASSERT_TRUE(live) << "server did not start";
  const v1::GraphDef graph = TrafficGraph("traffic", v1::FLOAT32, v1::NCHW, 9);
  ASSERT_TRUE(admin.LoadGraph(graph).ok());
  const double bound = backend == "cpu" ? 1e-5 : 1e-3;  // TF32 on the GPU
  const std::vector<TrafficRequest> requests = MixedShapes(graph, bound);

  std::atomic<bool> signalled{false};
  const TrafficResult result = SendTraffic(address, requests, 8, 50, [&](int64_t answered) {
    if (answered == 120 && !signalled.exchange(true)) kill(pid, SIGTERM);
  });
  int wait_status = 0;
  ASSERT_EQ(waitpid(pid, &wait_status, 0), pid);
  ASSERT_TRUE(WIFEXITED(wait_status));
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
  EXPECT_EQ(result.sent, 400);
  EXPECT_EQ(result.wrong, 0);
  EXPECT_GE(result.correct, 120);
  // Refused after SIGTERM: UNAVAILABLE from the draining server, or
  // CANCELLED from gRPC for calls that reached the transport as it closed.
  // Neither was accepted: the server's own count below proves it.
  int64_t refused = 0;
  for (const auto& [code, count] : result.errors) {
    EXPECT_TRUE(code == "UNAVAILABLE" || code == "CANCELLED")
        << count << " requests failed with " << code << ": " << result.messages.at(code);
    refused += count;
  }
  EXPECT_EQ(result.correct + refused, result.sent);
  // The server counts what it accepted and answered; every accepted request
  // was answered, and the client saw each of those answers as correct.
  std::ifstream log(log_path);
  std::string line, stopped;
  while (std::getline(log, line)) {
    if (line.find("stopped:") != std::string::npos) stopped = line;
  }
  const std::string expected = absl::StrCat("stopped: ", result.correct, " requests accepted, ",
                                            result.correct, " answered");
  EXPECT_NE(stopped.find(expected), std::string::npos)
      << "server said '" << stopped << "', expected '" << expected << "'";
  std::printf("backend %s: sent %ld: %ld correct, %ld refused after SIGTERM (%s); server: %s; "
              "exit code %d\n",
              backend.c_str(), result.sent, result.correct, refused,
              absl::StrJoin(result.errors, ", ", absl::PairFormatter("=")).c_str(),
              stopped.c_str(), WEXITSTATUS(wait_status));
}

}  // namespace
}  // namespace convserve
