// convserve-load --streaming against a real server on loopback: the same
// outputs as unary ModelInfer, with tensors in the messages and in system
// shared memory, and per-request errors counted by code.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/graph_file.h"
#include "client/load_generator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/load/load_test_support.h"
#include "tests/test_util/command.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

LoadSessionOptions StreamingSession(const InstrumentedServer& server, SharedMemoryKind kind) {
  LoadSessionOptions options = ResnetSession(server.address());
  options.protocol = Protocol::kKServe;
  options.streaming = true;
  options.shared_memory = kind;
  options.shared_memory_slots = 4;
  options.verify = true;
  return options;
}

// The first output of a unary KServe session, tensors in the messages.
std::string UnaryOutput(const InstrumentedServer& server) {
  LoadSessionOptions options = ResnetSession(server.address());
  options.protocol = Protocol::kKServe;
  std::unique_ptr<LoadSession> session = CreateSession(options);
  if (session == nullptr) return "";
  absl::StatusOr<InferOutput> output = session->Send();
  EXPECT_TRUE(output.ok()) << output.status();
  if (!output.ok()) return "";
  EXPECT_TRUE(output->FetchBytes().ok());
  return output->bytes;
}

class LoadStreamingTest : public ::testing::TestWithParam<SharedMemoryKind> {};

TEST_P(LoadStreamingTest, SameOutputsAsUnaryCalls) {
  InstrumentedServer server;
  const std::string unary = UnaryOutput(server);
  ASSERT_EQ(unary.size(), 32u * 8 * 8 * 4);
  std::unique_ptr<LoadSession> session = CreateSession(StreamingSession(server, GetParam()));
  ASSERT_NE(session, nullptr);
  EXPECT_THAT(session->transport(), HasSubstr("ModelStreamInfer streams (one per connection)"));
  {
    // Scoped: the output holds its shared-memory slot while it lives.
    absl::StatusOr<InferOutput> first = session->Send();
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE(first->FetchBytes().ok());
    EXPECT_TRUE(first->bytes == unary) << "streamed output differs from the unary one";
  }

  LoadOptions options = ClosedLoopByCount({1, 4}, 25, 1);
  options.verify_every = 1;
  absl::StatusOr<RunResult> result = RunLoad(*session, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->streaming);
  EXPECT_EQ(result->totals.errors, 0);
  EXPECT_EQ(result->totals.ok, server.run_count() - 1);  // less the unary probe
  for (const LevelResult& level : result->levels) EXPECT_EQ(level.ok, 25);
  ASSERT_TRUE(result->verify.has_value());
  EXPECT_EQ(result->verify->mismatches, 0) << result->verify->first_problem;
}

INSTANTIATE_TEST_SUITE_P(Tensors, LoadStreamingTest,
                         ::testing::Values(SharedMemoryKind::kNone, SharedMemoryKind::kSystem),
                         [](const ::testing::TestParamInfo<SharedMemoryKind>& info) {
                           return info.param == SharedMemoryKind::kNone ? "InMessages"
                                                                        : "InSystemSharedMemory";
                         });

TEST(LoadStreamingErrorsTest, FailedRequestsAreCountedByCodeAndTheStreamGoesOn) {
  InstrumentedBackendOptions failing;
  failing.fail_every = 4;
  InstrumentedServer server(failing);
  std::unique_ptr<LoadSession> session =
      CreateSession(StreamingSession(server, SharedMemoryKind::kNone));
  ASSERT_NE(session, nullptr);
  absl::StatusOr<InferOutput> first = session->Send();
  absl::StatusOr<RunResult> result = RunLoad(*session, ClosedLoopByCount({2}, 40, 1));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->totals.errors, 0);
  EXPECT_EQ(result->totals.errors_by_code["INTERNAL"], result->totals.errors);
  EXPECT_EQ(result->totals.ok, server.run_count());
  EXPECT_EQ(result->levels[0].requests, 40);
}

TEST(LoadStreamingBinaryTest, StreamingImpliesKServeAndMatchesUnary) {
  InstrumentedServer server;
  const std::vector<std::string> common = {
      LoadBinary(), "--server=" + server.address(),
      "--graph_file=" + SourcePath("deploy/examples/resnet_block.textproto"),
      "--input_shape=1,3,16,16"};
  const std::string unary_path = TempPath("unary.bin");
  const std::string stream_path = TempPath("stream.bin");
  std::vector<std::string> unary = common;
  unary.insert(unary.end(), {"--protocol=kserve", "--save_output=" + unary_path});
  const CommandResult unary_run = RunCommand(unary);
  ASSERT_EQ(unary_run.exit_code, 0) << unary_run.output;

  std::vector<std::string> stream = common;
  stream.insert(stream.end(), {"--streaming", "--verify", "--save_output=" + stream_path,
                               "--concurrency_range=4", "--warmup=0s", "--window_requests=20",
                               "--stable_windows=1", "--max_windows=1"});
  const CommandResult stream_run = RunCommand(stream);
  ASSERT_EQ(stream_run.exit_code, 0) << stream_run.output;
  EXPECT_THAT(stream_run.output, HasSubstr("protocol kserve"));
  EXPECT_THAT(stream_run.output, HasSubstr("transport: ModelStreamInfer streams"));
  EXPECT_THAT(stream_run.output, HasSubstr(" 0 mismatches"));
  const absl::StatusOr<std::string> unary_bytes = ReadFileBytes(unary_path);
  const absl::StatusOr<std::string> stream_bytes = ReadFileBytes(stream_path);
  ASSERT_TRUE(unary_bytes.ok() && stream_bytes.ok());
  EXPECT_TRUE(*unary_bytes == *stream_bytes) << "the outputs differ";
}

}  // namespace
}  // namespace convserve
