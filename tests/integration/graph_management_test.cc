// --graph_management (open, token, off), --graph_dir and the refusal metric
// on a real server: both protocols' graph management calls, through gRPC.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "tests/test_util/small_graph.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

v1::GraphDef SmallGraph(const std::string& name) { return SmallConvGraph(name, 11); }

v1::InferRequest SmallRequest(const std::string& graph) {
  v1::InferRequest request;
  request.set_graph(graph);
  v1::Tensor* input = request.mutable_input();
  for (int64_t d : {1, 3, 8, 8}) input->add_shape(d);
  input->set_data(RandomTensorBytes(v1::FLOAT32, 3 * 8 * 8, 5));
  return request;
}

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/graph_management_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A directory with graph "alpha" in binary form (weights inside, unnamed:
// the file names it) and "beta" in text form with its name set.
std::string GraphDirectory(const std::string& name) {
  const std::string dir = FreshDir(name);
  v1::GraphDef alpha = SmallGraph("");
  WriteText(dir + "/alpha.pb", alpha.SerializeAsString());
  v1::GraphDef beta = SmallGraph("beta");
  WriteText(dir + "/beta.textproto", beta.Utf8DebugString());
  WriteText(dir + "/README.md", "not a graph\n");
  return dir;
}

class KServeCalls {
 public:
  explicit KServeCalls(const std::string& address)
      : stub_(inference::GRPCInferenceService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

  grpc::Status Load(const std::string& model, const std::string& token = "") {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    inference::RepositoryModelLoadRequest request;
    request.set_model_name(model);
    inference::RepositoryModelLoadResponse response;
    return stub_->RepositoryModelLoad(&context, request, &response);
  }
  grpc::Status Unload(const std::string& model, const std::string& token = "") {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    inference::RepositoryModelUnloadRequest request;
    request.set_model_name(model);
    inference::RepositoryModelUnloadResponse response;
    return stub_->RepositoryModelUnload(&context, request, &response);
  }
  inference::RepositoryIndexResponse Index() {
    grpc::ClientContext context;
    inference::RepositoryIndexResponse response;
    EXPECT_TRUE(stub_->RepositoryIndex(&context, {}, &response).ok());
    return response;
  }

 private:
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

std::unique_ptr<TestServer> StartServer(const TestServerOptions& options) {
  absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::TryStart({}, options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(GraphManagementTest, TokenModeRefusesCallsWithoutTheTokenOnBothProtocols) {
  const std::string dir = FreshDir("token");
  WriteText(dir + "/token", "t0ken-one\n");
  TestServerOptions options;
  options.graph_management.mode = GraphManagementMode::kToken;
  options.graph_management.token_file = dir + "/token";
  std::unique_ptr<TestServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);

  ClientOptions anonymous_options;
  anonymous_options.address = server->address();
  ConvServeClient anonymous(anonymous_options);
  ClientOptions wrong_options = anonymous_options;
  wrong_options.graph_management_token = "t0ken-two";
  ConvServeClient wrong(wrong_options);
  ClientOptions right_options = anonymous_options;
  right_options.graph_management_token = "t0ken-one";
  ConvServeClient right(right_options);

  const absl::Status no_token = anonymous.LoadGraph(SmallGraph("g")).status();
  EXPECT_EQ(no_token.code(), absl::StatusCode::kUnauthenticated) << no_token;
  EXPECT_THAT(no_token.message(), HasSubstr("LoadGraph needs the graph management token"));
  EXPECT_EQ(wrong.LoadGraph(SmallGraph("g")).status().code(),
            absl::StatusCode::kUnauthenticated);
  ASSERT_TRUE(right.LoadGraph(SmallGraph("g")).ok());
  // Inference and reading need no token.
  EXPECT_TRUE(anonymous.Infer(SmallRequest("g")).ok());
  EXPECT_TRUE(anonymous.ListGraphs().ok());

  KServeCalls kserve(server->address());
  EXPECT_EQ(kserve.Unload("g").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(kserve.Unload("g", "t0ken-two").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(kserve.Load("g").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(anonymous.UnloadGraph("g").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(right.GetGraph("g").ok()) << "refused calls changed nothing";
  EXPECT_TRUE(kserve.Unload("g", "t0ken-one").ok());
  EXPECT_EQ(right.GetGraph("g").status().code(), absl::StatusCode::kNotFound);

  const std::string metrics = server->server()->metrics().Render();
  EXPECT_THAT(metrics, HasSubstr(
      R"(convserve_graph_management_refusals_total{reason="missing_token",rpc="LoadGraph"} 1)"));
  EXPECT_THAT(metrics, HasSubstr(
      R"(convserve_graph_management_refusals_total{reason="wrong_token",rpc="LoadGraph"} 1)"));
  EXPECT_THAT(metrics, HasSubstr(
      R"(convserve_graph_management_refusals_total{reason="missing_token",rpc="RepositoryModelUnload"} 1)"));
  EXPECT_THAT(metrics, HasSubstr(
      R"(convserve_graph_management_refusals_total{reason="wrong_token",rpc="RepositoryModelUnload"} 1)"));
  EXPECT_THAT(metrics, HasSubstr(
      R"(convserve_graph_management_refusals_total{reason="missing_token",rpc="UnloadGraph"} 1)"));

  // SIGHUP's reload: the new token replaces the old one.
  WriteText(dir + "/token", "t0ken-two");
  ASSERT_TRUE(server->server()->Reload().ok());
  EXPECT_EQ(right.LoadGraph(SmallGraph("g")).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(wrong.LoadGraph(SmallGraph("g")).ok());
}

TEST(GraphManagementTest, OffModeServesTheGraphDirectoryAndRefusesChanges) {
  TestServerOptions options;
  options.graph_management.mode = GraphManagementMode::kOff;
  options.graph_dir = GraphDirectory("off");
  std::unique_ptr<TestServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ClientOptions client_options;
  client_options.address = server->address();
  ConvServeClient client(client_options);

  absl::StatusOr<v1::InferResponse> alpha = client.Infer(SmallRequest("alpha"));
  ASSERT_TRUE(alpha.ok()) << alpha.status();
  absl::StatusOr<v1::InferResponse> beta = client.Infer(SmallRequest("beta"));
  ASSERT_TRUE(beta.ok()) << beta.status();
  // Same definition and weights under two names: the same outputs.
  EXPECT_EQ(alpha->output().data(), beta->output().data());

  const absl::Status load = client.LoadGraph(SmallGraph("other")).status();
  EXPECT_EQ(load.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(load.message(), HasSubstr("--graph_management=off"));
  EXPECT_EQ(client.UnloadGraph("alpha").code(), absl::StatusCode::kPermissionDenied);
  KServeCalls kserve(server->address());
  EXPECT_EQ(kserve.Load("alpha").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(kserve.Unload("beta").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(client.GetGraph("alpha").ok());
  EXPECT_TRUE(client.GetGraph("beta").ok());
  EXPECT_THAT(server->server()->metrics().Render(),
              HasSubstr(R"(convserve_graph_management_refusals_total{reason="disabled",rpc="LoadGraph"} 1)"));
}

TEST(GraphManagementTest, RepositoryModelLoadNamesGraphsOfTheGraphDirectory) {
  TestServerOptions options;
  options.graph_dir = GraphDirectory("open");
  std::unique_ptr<TestServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  KServeCalls kserve(server->address());
  ClientOptions client_options;
  client_options.address = server->address();
  ConvServeClient client(client_options);

  ASSERT_TRUE(kserve.Unload("alpha").ok());
  inference::RepositoryIndexResponse index = kserve.Index();
  ASSERT_EQ(index.models_size(), 2);
  EXPECT_EQ(index.models(0).name(), "beta");
  EXPECT_EQ(index.models(0).state(), "READY");
  EXPECT_EQ(index.models(1).name(), "alpha");
  EXPECT_EQ(index.models(1).state(), "UNAVAILABLE");
  EXPECT_EQ(client.Infer(SmallRequest("alpha")).status().code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(kserve.Load("alpha").ok());
  EXPECT_TRUE(client.Infer(SmallRequest("alpha")).ok());
  EXPECT_TRUE(kserve.Load("alpha").ok()) << "loading a loaded graph again is a no-op";

  const grpc::Status missing = kserve.Load("gamma");
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(missing.error_message(), HasSubstr("has no graph 'gamma'"));
  for (const std::string name : {"../alpha", ".hidden", "a/b"}) {
    const grpc::Status escaped = kserve.Load(name);
    EXPECT_EQ(escaped.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
  }
  // A graph registered by LoadGraph is not in the directory; loading it by
  // name is still the no-op it was.
  ASSERT_TRUE(client.LoadGraph(SmallGraph("registered")).ok());
  EXPECT_TRUE(kserve.Load("registered").ok());
}

TEST(GraphManagementTest, ABadGraphFileStopsTheStartNamingTheFile) {
  const std::string dir = GraphDirectory("bad");
  WriteText(dir + "/broken.textproto", "layers { out_channels: \n");
  TestServerOptions options;
  options.graph_dir = dir;
  absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::TryStart({}, options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("broken.textproto"));

  options.graph_dir = dir + "/no_such_dir";
  EXPECT_EQ(TestServer::TryStart({}, options).status().code(), absl::StatusCode::kNotFound);

  const std::string renamed = GraphDirectory("renamed");
  WriteText(renamed + "/gamma.textproto", SmallGraph("delta").Utf8DebugString());
  options.graph_dir = renamed;
  server = TestServer::TryStart({}, options);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("named 'delta' but its file says 'gamma'"));
}

}  // namespace
}  // namespace convserve
