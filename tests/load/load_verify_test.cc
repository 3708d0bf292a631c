// --verify: outputs are compared with the CPU reference by relative L2 error
// with a per-dtype bound (float32 1e-3, float16 1e-2). A server whose backend
// scales its outputs is caught, one within the bound is not, and the binary's
// exit code says which.
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "client/load_generator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/load/load_test_support.h"
#include "tests/test_util/command.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

struct VerifyCase {
  // Test instance name.
  std::string name;
  std::string graph_file;
  std::vector<int64_t> input_shape;
  // What the server's backend multiplies its outputs by.
  float output_scale;
  bool expect_pass;
};

void PrintTo(const VerifyCase& c, std::ostream* os) { *os << c.name; }

class LoadVerifyTest : public ::testing::TestWithParam<VerifyCase> {};

TEST_P(LoadVerifyTest, ComparesSampledOutputsWithTheCpuReference) {
  const VerifyCase& c = GetParam();
  InstrumentedBackendOptions backend;
  backend.output_scale = c.output_scale;
  InstrumentedServer server(backend);
  LoadSessionOptions session_options = ResnetSession(server.address());
  session_options.graph_file = SourcePath(c.graph_file);
  session_options.input_shape = c.input_shape;
  session_options.verify = true;
  absl::StatusOr<std::unique_ptr<LoadSession>> session =
      LoadSession::Create(session_options, [](const std::string&) {});
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Send().ok());
  ASSERT_NE((*session)->verifier(), nullptr);
  absl::StatusOr<InferOutput> probe = (*session)->Send();
  ASSERT_TRUE(probe.ok()) << probe.status();
  ASSERT_TRUE(probe->FetchBytes().ok());
  (*session)->verifier()->Check(probe->bytes);

  LoadOptions options = ClosedLoopByCount({2}, 20, 1);
  options.verify_every = 3;
  absl::StatusOr<RunResult> result = RunLoad(**session, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->verify.has_value());
  const VerifyResult& v = *result->verify;
  // The probe above, then every third of at least 20 responses.
  EXPECT_GE(v.checked, 1 + 7);
  // Scaling by s is a relative L2 error of |s - 1| (up to output rounding).
  const double error = std::abs(c.output_scale - 1.0);
  EXPECT_NEAR(v.max_rel_l2, error, 0.2 * error + 1e-6);
  if (c.expect_pass) {
    EXPECT_EQ(v.mismatches, 0) << v.first_problem;
  } else {
    EXPECT_EQ(v.mismatches, v.checked);
    EXPECT_THAT(v.first_problem, HasSubstr("relative L2 error"));
  }
}

INSTANTIATE_TEST_SUITE_P(Bounds, LoadVerifyTest,
                         ::testing::Values(VerifyCase{"Float32Exact",
                                                      "deploy/examples/resnet_block.textproto",
                                                      {1, 3, 16, 16},
                                                      1.0f,
                                                      true},
                                           VerifyCase{"Float32WithinTf32Bound",
                                                      "deploy/examples/resnet_block.textproto",
                                                      {1, 3, 16, 16},
                                                      1.0005f,
                                                      true},
                                           VerifyCase{"Float32OnePercentOff",
                                                      "deploy/examples/resnet_block.textproto",
                                                      {1, 3, 16, 16},
                                                      1.01f,
                                                      false},
                                           VerifyCase{"Float16NhwcDepthwiseWithinBound",
                                                      "deploy/examples/mobilenet_block.json",
                                                      {1, 8, 16, 16},
                                                      1.005f,
                                                      true},
                                           VerifyCase{"Float16NhwcDepthwiseThreePercentOff",
                                                      "deploy/examples/mobilenet_block.json",
                                                      {1, 8, 16, 16},
                                                      1.03f,
                                                      false}),
                         [](const ::testing::TestParamInfo<VerifyCase>& info) {
                           return info.param.name;
                         });

TEST(LoadVerifyBinaryTest, ExitCodeFailsOnWrongNumbersOnly) {
  InstrumentedServer good;
  InstrumentedBackendOptions wrong;
  wrong.output_scale = 1.01f;
  InstrumentedServer bad(wrong);
  const auto args = [](const std::string& address, std::vector<std::string> extra) {
    std::vector<std::string> argv = {
        LoadBinary(), "--server=" + address,
        "--graph_file=" + SourcePath("deploy/examples/resnet_block.textproto"),
        "--input_shape=1,3,16,16", "--verify"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  const std::vector<std::string> load = {"--concurrency_range=2", "--warmup=0s",
                                         "--window_requests=20",  "--stable_windows=1",
                                         "--max_windows=1",       "--verify_every=2"};

  const CommandResult passed = RunCommand(args(good.address(), load));
  EXPECT_EQ(passed.exit_code, 0) << passed.output;
  EXPECT_THAT(passed.output, HasSubstr(" 0 mismatches"));

  const CommandResult failed = RunCommand(args(bad.address(), load));
  EXPECT_EQ(failed.exit_code, 3) << failed.output;
  EXPECT_THAT(failed.output, HasSubstr("verification FAILED: relative L2 error"));

  // Without a load mode too (--requests one after another).
  const CommandResult sequential = RunCommand(args(bad.address(), {"--requests=3"}));
  EXPECT_EQ(sequential.exit_code, 3) << sequential.output;
  EXPECT_THAT(sequential.output, HasSubstr("output [1, 32, 8, 8] FLOAT32: "));
}

}  // namespace
}  // namespace convserve
