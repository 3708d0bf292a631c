// convserve-load --shared_memory=system against a real server on loopback:
// the outputs are the bytes the message path carries, a response's output
// stays in its slot until asked for, closed and open loops work with fewer
// slots than requests in flight, and every way out (the end of a run, a
// failed setup, Ctrl-C) leaves no region registered on the server and
// nothing in /dev/shm. Bad flag combinations exit 1 with a clear message.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/graph_file.h"
#include "client/load_generator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/load/load_test_support.h"
#include "tests/test_util/command.h"

namespace convserve {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

// Names in /dev/shm that start with `prefix`.
std::vector<std::string> ShmObjects(const std::string& prefix) {
  std::vector<std::string> names;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (const dirent* entry = readdir(dir)) {
    if (absl::StartsWith(entry->d_name, prefix)) names.push_back(entry->d_name);
  }
  closedir(dir);
  return names;
}

// System regions the server has registered, all clients together.
int RegisteredRegions(const InstrumentedServer& server) {
  ConvServeClient client(ClientOptions{server.address()});
  absl::StatusOr<inference::SystemSharedMemoryStatusResponse> status =
      client.SystemSharedMemoryStatus("");
  EXPECT_TRUE(status.ok()) << status.status();
  return status.ok() ? status->regions_size() : -1;
}

// "convserve-load-<pid>-<n>" from the binary's "registered ... regions" line.
std::string RegionPrefix(const std::string& output) {
  std::smatch match;
  if (!std::regex_search(output, match, std::regex("regions '(convserve-load-[0-9]+-[0-9]+)-input'"))) {
    ADD_FAILURE() << "no region names in:\n" << output;
    return "no-such-prefix";
  }
  return match[1];
}

LoadSessionOptions KServeSession(const InstrumentedServer& server, SharedMemoryKind kind,
                                 int slots) {
  LoadSessionOptions options = ResnetSession(server.address());
  options.protocol = Protocol::kKServe;
  options.shared_memory = kind;
  options.shared_memory_slots = slots;
  options.verify = true;
  return options;
}

TEST(LoadSharedMemoryTest, OutputsAreTheMessagePathsBytesReadOnlyWhenAsked) {
  InstrumentedServer server;
  std::string message_bytes;
  {
    std::unique_ptr<LoadSession> session =
        CreateSession(KServeSession(server, SharedMemoryKind::kNone, 1));
    ASSERT_NE(session, nullptr);
    absl::StatusOr<InferOutput> output = session->Send();
    ASSERT_TRUE(output.ok()) << output.status();
    // Left in the received message until asked for (model_infer_bytes.h).
    ASSERT_NE(output->slot, nullptr);
    EXPECT_TRUE(output->bytes.empty()) << "read before anyone asked";
    ASSERT_TRUE(output->FetchBytes().ok());
    message_bytes = output->bytes;
  }
  ASSERT_EQ(message_bytes.size(), 32u * 8 * 8 * 4);

  const std::string prefix = absl::StrCat("convserve-load-", getpid(), "-");
  {
    std::unique_ptr<LoadSession> session =
        CreateSession(KServeSession(server, SharedMemoryKind::kSystem, 4));
    ASSERT_NE(session, nullptr);
    EXPECT_EQ(ShmObjects(prefix).size(), 2u);
    EXPECT_EQ(RegisteredRegions(server), 2);
    EXPECT_THAT(session->transport(),
                HasSubstr("unary ModelInfer, tensors in system shared memory (4 output slots"));
    absl::StatusOr<InferOutput> output = session->Send();
    ASSERT_TRUE(output.ok()) << output.status();
    ASSERT_NE(output->slot, nullptr);
    EXPECT_EQ(output->byte_size, static_cast<int64_t>(message_bytes.size()));
    EXPECT_TRUE(output->bytes.empty()) << "read before anyone asked";
    ASSERT_TRUE(output->FetchBytes().ok());
    EXPECT_EQ(output->bytes, message_bytes);
  }
  EXPECT_EQ(ShmObjects(prefix).size(), 0u);
  EXPECT_EQ(RegisteredRegions(server), 0);
}

TEST(LoadSharedMemoryTest, ConcurrencySweepVerifiesEveryResponse) {
  InstrumentedServer server;
  std::unique_ptr<LoadSession> session =
      CreateSession(KServeSession(server, SharedMemoryKind::kSystem, 4));
  ASSERT_NE(session, nullptr);
  LoadOptions options = ClosedLoopByCount({1, 2, 4}, 20, 1);
  options.verify_every = 1;
  absl::StatusOr<RunResult> result = RunLoad(*session, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->shared_memory, "system");
  EXPECT_FALSE(result->streaming);
  EXPECT_EQ(result->totals.errors, 0) << result->totals.errors_by_code.begin()->first;
  EXPECT_EQ(result->totals.ok, server.run_count());
  ASSERT_EQ(result->levels.size(), 3u);
  for (const LevelResult& level : result->levels) {
    EXPECT_EQ(level.ok, 20);
    ASSERT_TRUE(level.server_breakdown.ok()) << level.server_breakdown.status();
    EXPECT_EQ(level.server_breakdown->success, level.level_ok);
  }
  ASSERT_TRUE(result->verify.has_value());
  EXPECT_EQ(result->verify->checked, result->totals.ok);
  EXPECT_EQ(result->verify->mismatches, 0) << result->verify->first_problem;
  EXPECT_EQ(result->output_bytes, 32 * 8 * 8 * 4);
}

// Three requests in flight, one output slot: blocking callers wait for it
// on their threads, callback and open-loop requests in the sender's queue.
TEST(LoadSharedMemoryTest, RequestsWaitForAFreeSlotInEveryLoop) {
  InstrumentedServer server;
  std::unique_ptr<LoadSession> session =
      CreateSession(KServeSession(server, SharedMemoryKind::kSystem, 1));
  ASSERT_NE(session, nullptr);
  LoadOptions closed = ClosedLoopByCount({3}, 30, 1);
  closed.verify_every = 1;
  absl::StatusOr<RunResult> result = RunLoad(*session, closed);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->levels[0].ok, 30);

  LoadOptions callback = closed;
  callback.blocking_calls = false;
  result = RunLoad(*session, callback);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->levels[0].ok, 30);
  EXPECT_EQ(result->totals.errors, 0);

  // The open loop keeps its schedule until the window's 30 answers are in,
  // and the requests it sent meanwhile drain through the one slot after the
  // level ends. On a slow build (a sanitizer's, on a busy machine) the last
  // of that tail can wait past the deadline for the slot; each such request
  // fails with DEADLINE_EXCEEDED (RunLoad returns only once every request
  // has its answer), and the window's own 30 requests all waited their turn
  // and succeeded. One dispatched just before its deadline may run on the
  // server and still time out in the client, so the server's runs lie
  // between the client's successes and its sends.
  LoadOptions open = closed;
  open.mode = LoadMode::kOpenLoop;
  open.request_rates = {400};
  result = RunLoad(*session, open);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->levels[0].ok, 30);
  EXPECT_EQ(result->levels[0].errors, 0);
  EXPECT_GE(server.run_count(), result->totals.ok);
  EXPECT_LE(server.run_count(), result->totals.sent);
  for (const auto& [code, count] : result->totals.errors_by_code) {
    EXPECT_EQ(code, "DEADLINE_EXCEEDED") << count << " requests";
  }
  EXPECT_EQ(result->verify->mismatches, 0) << result->verify->first_problem;
}

std::vector<std::string> Args(const InstrumentedServer& server, std::vector<std::string> extra) {
  std::vector<std::string> argv = {
      LoadBinary(), "--server=" + server.address(),
      "--graph_file=" + SourcePath("deploy/examples/resnet_block.textproto"),
      "--input_shape=1,3,16,16"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

TEST(LoadSharedMemoryBinaryTest, VerifiedSweepMatchesMessagesAndLeavesNothingBehind) {
  InstrumentedServer server;
  const std::string message_output = TempPath("message.bin");
  const std::string shm_output = TempPath("shm.bin");
  const std::string csv_path = TempPath("shm.csv");
  const std::string json_path = TempPath("shm.json");
  const CommandResult message =
      RunCommand(Args(server, {"--protocol=kserve", "--save_output=" + message_output}));
  ASSERT_EQ(message.exit_code, 0) << message.output;

  const CommandResult shm = RunCommand(Args(
      server, {"--shared_memory=system", "--verify", "--verify_every=1", "--save_output=" + shm_output,
               "--concurrency_range=1:4:x2", "--warmup=0s", "--window_requests=20",
               "--stable_windows=1", "--max_windows=1", "--csv=" + csv_path,
               "--json=" + json_path}));
  ASSERT_EQ(shm.exit_code, 0) << shm.output;
  EXPECT_THAT(shm.output, HasSubstr("transport: unary ModelInfer, tensors in system shared "
                                    "memory (4 output slots"));
  EXPECT_THAT(shm.output, HasSubstr(" 0 mismatches"));
  EXPECT_THAT(shm.output, HasSubstr("server-side breakdown (GetStatistics"));
  const absl::StatusOr<std::string> message_bytes = ReadFileBytes(message_output);
  const absl::StatusOr<std::string> shm_bytes = ReadFileBytes(shm_output);
  ASSERT_TRUE(message_bytes.ok() && shm_bytes.ok());
  EXPECT_EQ(message_bytes->size(), 32u * 8 * 8 * 4);
  EXPECT_TRUE(*message_bytes == *shm_bytes) << "the outputs differ";

  EXPECT_EQ(ShmObjects(RegionPrefix(shm.output)).size(), 0u);
  EXPECT_EQ(RegisteredRegions(server), 0);

  absl::StatusOr<std::string> json = ReadFileBytes(json_path);
  ASSERT_TRUE(json.ok());
  const google::protobuf::Struct report = ParseJson(*json);
  EXPECT_EQ(Field(report, "shared_memory").string_value(), "system");
  EXPECT_FALSE(Field(report, "streaming").bool_value());
  EXPECT_THAT(Field(report, "transport").string_value(), HasSubstr("system shared memory"));
  absl::StatusOr<std::string> csv = ReadFileBytes(csv_path);
  ASSERT_TRUE(csv.ok());
  const std::vector<std::vector<std::string>> rows = ParseCsv(*csv);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].end()[-2], "shared_memory");
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].end()[-2], "system");
    EXPECT_EQ(rows[i].end()[-1], "false");
  }
}

// Runs convserve-load until it prints `ready`, then sends it SIGINT; returns
// its exit code and output.
CommandResult InterruptWhen(const std::vector<std::string>& argv, const std::string& ready,
                            const std::function<void()>& before_interrupt) {
  CommandResult result;
  // Built before fork: the child of a threaded process may not allocate.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (pipe(out) != 0) return result;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    close(out[0]);
    close(out[1]);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool interrupted = false;
  char buffer[4096];
  for (;;) {
    if (!interrupted && absl::StrContains(result.output, ready)) {
      before_interrupt();
      kill(pid, SIGINT);
      interrupted = true;
    }
    pollfd readable{out[0], POLLIN, 0};
    const int wait_ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (wait_ms <= 0 || poll(&readable, 1, wait_ms) <= 0) {
      ADD_FAILURE() << "convserve-load did not finish; output so far:\n" << result.output;
      kill(pid, SIGKILL);
      break;
    }
    const ssize_t n = read(out[0], buffer, sizeof(buffer));
    if (n <= 0) break;
    result.output.append(buffer, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

TEST(LoadSharedMemoryBinaryTest, InterruptUnregistersAndUnlinksTheRegions) {
  InstrumentedServer server;
  int registered_while_running = -1;
  const CommandResult run = InterruptWhen(
      Args(server, {"--shared_memory=system", "--concurrency_range=2", "--warmup=0s",
                    "--window=60s", "--max_windows=1", "--stable_windows=1"}),
      // The first output is printed after registration, before the load.
      "output [1, 32, 8, 8]", [&] { registered_while_running = RegisteredRegions(server); });
  EXPECT_EQ(registered_while_running, 2);
  EXPECT_EQ(run.exit_code, 128 + SIGINT) << run.output;
  EXPECT_THAT(run.output, HasSubstr("interrupted: removing shared memory regions"));
  EXPECT_EQ(ShmObjects(RegionPrefix(run.output)).size(), 0u);
  EXPECT_EQ(RegisteredRegions(server), 0);
}

TEST(LoadSharedMemoryBinaryTest, BadCombinationsExitWithAClearMessage) {
  InstrumentedServer server;
  const CommandResult convserve =
      RunCommand(Args(server, {"--shared_memory=system", "--protocol=convserve"}));
  EXPECT_EQ(convserve.exit_code, 1) << convserve.output;
  EXPECT_THAT(convserve.output, HasSubstr("--shared_memory=system needs --protocol=kserve"));

  const CommandResult streaming =
      RunCommand(Args(server, {"--streaming", "--protocol=convserve"}));
  EXPECT_EQ(streaming.exit_code, 1) << streaming.output;
  EXPECT_THAT(streaming.output, HasSubstr("--streaming needs --protocol=kserve"));

  const CommandResult unknown = RunCommand(Args(server, {"--shared_memory=posix"}));
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_THAT(unknown.output, HasSubstr("--shared_memory='posix': must be none, system or cuda"));

  // CUDA regions need a CUDA build, a GPU here and a GPU server; this server
  // runs on CPU, so it fails at one of the three, and leaves nothing behind.
  const CommandResult cuda = RunCommand(Args(server, {"--shared_memory=cuda"}));
  EXPECT_EQ(cuda.exit_code, 1) << cuda.output;
  EXPECT_THAT(cuda.output, AnyOf(HasSubstr("--shared_memory=cuda needs a CUDA build"),
                                 HasSubstr("no CUDA GPU is usable on this machine"),
                                 HasSubstr("this server runs on CPU")));
  EXPECT_EQ(RegisteredRegions(server), 0);
}

}  // namespace
}  // namespace convserve
