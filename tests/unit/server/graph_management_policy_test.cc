#include "server/graph_management_policy.h"

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

using Metadata = GraphManagementPolicy::Metadata;

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::trunc) << text;
  return path;
}

// The metadata a client sends; the strings must outlive the map.
Metadata WithAuthorization(const std::string& value) {
  Metadata metadata;
  metadata.emplace("authorization", value);
  return metadata;
}

class RecordedRefusals {
 public:
  GraphManagementPolicy::RefusalObserver Observer() {
    return [this](absl::string_view rpc, absl::string_view reason) {
      refusals_.emplace_back(std::string(rpc), std::string(reason));
    };
  }
  const std::vector<std::pair<std::string, std::string>>& refusals() const { return refusals_; }

 private:
  std::vector<std::pair<std::string, std::string>> refusals_;
};

std::unique_ptr<GraphManagementPolicy> TokenPolicy(const std::string& token_file,
                                                   RecordedRefusals* recorded) {
  GraphManagementOptions options;
  options.mode = GraphManagementMode::kToken;
  options.token_file = token_file;
  absl::StatusOr<std::unique_ptr<GraphManagementPolicy>> policy =
      GraphManagementPolicy::Create(options, recorded->Observer());
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *std::move(policy);
}

TEST(GraphManagementPolicyTest, ParsesTheThreeModesAndRefusesOthers) {
  EXPECT_EQ(*ParseGraphManagementMode("open"), GraphManagementMode::kOpen);
  EXPECT_EQ(*ParseGraphManagementMode("token"), GraphManagementMode::kToken);
  EXPECT_EQ(*ParseGraphManagementMode("off"), GraphManagementMode::kOff);
  const absl::StatusOr<GraphManagementMode> bad = ParseGraphManagementMode("closed");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("--graph_management 'closed'"));
}

TEST(GraphManagementPolicyTest, OpenAllowsAnyCaller) {
  RecordedRefusals recorded;
  auto policy = *GraphManagementPolicy::Create({}, recorded.Observer());
  EXPECT_TRUE(policy->Authorize(Metadata(), "LoadGraph").ok());
  EXPECT_TRUE(recorded.refusals().empty());
}

TEST(GraphManagementPolicyTest, OffRefusesEveryCallerWithPermissionDenied) {
  RecordedRefusals recorded;
  GraphManagementOptions options;
  options.mode = GraphManagementMode::kOff;
  auto policy = *GraphManagementPolicy::Create(options, recorded.Observer());
  const std::string value = "Bearer anything";
  const absl::Status status = policy->Authorize(WithAuthorization(value), "UnloadGraph");
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("UnloadGraph is disabled"));
  EXPECT_THAT(status.message(), HasSubstr("--graph_management=off"));
  EXPECT_THAT(recorded.refusals(), ElementsAre(Pair("UnloadGraph", "disabled")));
}

TEST(GraphManagementPolicyTest, TokenModeAcceptsOnlyTheBearerToken) {
  RecordedRefusals recorded;
  auto policy = TokenPolicy(WriteFile("token_a", "s3cret-token\n"), &recorded);
  const std::string right = "Bearer s3cret-token";
  const std::string wrong = "Bearer s3cret-tokem";
  const std::string prefix = "Bearer s3cret";
  const std::string basic = "Basic s3cret-token";
  EXPECT_TRUE(policy->Authorize(WithAuthorization(right), "LoadGraph").ok());

  const absl::Status missing = policy->Authorize(Metadata(), "LoadGraph");
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(missing.message(), HasSubstr("authorization: Bearer <token>"));
  EXPECT_EQ(policy->Authorize(WithAuthorization(wrong), "RepositoryModelLoad").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(policy->Authorize(WithAuthorization(prefix), "UnloadGraph").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(policy->Authorize(WithAuthorization(basic), "RepositoryModelUnload").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(recorded.refusals(),
              ElementsAre(Pair("LoadGraph", "missing_token"),
                          Pair("RepositoryModelLoad", "wrong_token"),
                          Pair("UnloadGraph", "wrong_token"),
                          Pair("RepositoryModelUnload", "missing_token")));
}

TEST(GraphManagementPolicyTest, ReloadTokenSwapsTheTokenAndKeepsItOnError) {
  RecordedRefusals recorded;
  const std::string path = WriteFile("token_b", "first");
  auto policy = TokenPolicy(path, &recorded);
  const std::string first = "Bearer first";
  const std::string second = "Bearer second";
  WriteFile("token_b", "  second \n");
  ASSERT_TRUE(policy->ReloadToken().ok());
  EXPECT_FALSE(policy->Authorize(WithAuthorization(first), "LoadGraph").ok());
  EXPECT_TRUE(policy->Authorize(WithAuthorization(second), "LoadGraph").ok());

  WriteFile("token_b", "\n");
  const absl::Status empty = policy->ReloadToken();
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(policy->Authorize(WithAuthorization(second), "LoadGraph").ok());
}

TEST(GraphManagementPolicyTest, TokenModeNeedsAReadableNonEmptyFile) {
  GraphManagementOptions options;
  options.mode = GraphManagementMode::kToken;
  EXPECT_EQ(GraphManagementPolicy::Create(options, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.token_file = ::testing::TempDir() + "/no_such_token_file";
  EXPECT_EQ(GraphManagementPolicy::Create(options, nullptr).status().code(),
            absl::StatusCode::kNotFound);
  options.token_file = WriteFile("token_empty", " \n");
  EXPECT_EQ(GraphManagementPolicy::Create(options, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace convserve
