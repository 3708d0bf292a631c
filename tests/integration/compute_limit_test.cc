// --max_request_flops on a real server: a request over the limit is
// INVALID_ARGUMENT naming its figure and the limit, on convserve.v1 Infer and
// on KServe ModelInfer, and runs nothing; one within it is served.
#include <memory>
#include <string>
#include <vector>

#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/small_graph.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

// 3 -> 4 channels 3x3 with bias and ReLU. On N x 3 x 8 x 8 it costs, per
// image, 2*4*3*9*6*6 = 7776 for the convolution plus 144 each for bias and
// ReLU: 8064.
constexpr double kFlopsPerImage = 8064;

v1::GraphDef CostGraph() { return SmallConvGraph("cost", 3); }

class ComputeLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InferenceCoreOptions options;
    // Two images fit, three do not.
    options.max_request_flops = 2.5 * kFlopsPerImage;
    server_ = TestServer::Start(options);
    ClientOptions client_options;
    client_options.address = server_->address();
    client_ = std::make_unique<ConvServeClient>(client_options);
    ASSERT_TRUE(client_->LoadGraph(CostGraph()).ok());
  }

  static v1::InferRequest Request(int64_t batch) {
    v1::InferRequest request;
    request.set_graph("cost");
    for (int64_t d : {batch, int64_t{3}, int64_t{8}, int64_t{8}}) {
      request.mutable_input()->add_shape(d);
    }
    request.mutable_input()->set_data(RandomTensorBytes(v1::FLOAT32, batch * 3 * 8 * 8, 9));
    return request;
  }

  static inference::ModelInferRequest KServeRequest(int64_t batch) {
    inference::ModelInferRequest request;
    request.set_model_name("cost");
    inference::ModelInferRequest::InferInputTensor* input = request.add_inputs();
    input->set_name("input");
    input->set_datatype("FP32");
    for (int64_t d : {batch, int64_t{3}, int64_t{8}, int64_t{8}}) input->add_shape(d);
    request.add_raw_input_contents(RandomTensorBytes(v1::FLOAT32, batch * 3 * 8 * 8, 9));
    return request;
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<ConvServeClient> client_;
};

TEST_F(ComputeLimitTest, ConvServeInferOverTheLimitIsInvalidArgument) {
  EXPECT_TRUE(client_->Infer(Request(2)).ok());
  const absl::Status refused = client_->Infer(Request(3)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("input shape [3, 3, 8, 8] of graph 'cost' needs "
                                           "2.419e+04 floating-point operations"));
  EXPECT_THAT(refused.message(), HasSubstr("limit of 2.016e+04 (--max_request_flops)"));
  EXPECT_EQ(server_->core()->accepted(), 1) << "the refused request reached a worker";
}

TEST_F(ComputeLimitTest, KServeModelInferOverTheLimitIsInvalidArgument) {
  EXPECT_TRUE(client_->ModelInfer(KServeRequest(1)).ok());
  const absl::Status refused = client_->ModelInfer(KServeRequest(4)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("needs 3.226e+04 floating-point operations"));
  EXPECT_THAT(refused.message(), HasSubstr("--max_request_flops"));
  EXPECT_EQ(server_->core()->accepted(), 1);
}

}  // namespace
}  // namespace convserve
