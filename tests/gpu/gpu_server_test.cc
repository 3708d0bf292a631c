// A request through the real gRPC server running the cuDNN backend returns
// what the CPU backend returns, within the per-dtype bounds. Skips without a GPU.
#include <cstdlib>
#include <memory>

#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "engine/cudnn/cudnn_backend.h"
#include "gtest/gtest.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

struct ServerCase {
  const char* name;
  v1::DataType type;
  v1::Layout layout;
  double bound;  // TF32 is allowed by default for float32
};

class GpuServerTest : public ::testing::TestWithParam<ServerCase> {};

TEST_P(GpuServerTest, GpuServerMatchesCpuServer) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  absl::StatusOr<std::unique_ptr<CudnnBackend>> gpu_backend = CudnnBackend::Create({});
  if (!gpu_backend.ok()) GTEST_SKIP() << "cuDNN backend unavailable: " << gpu_backend.status();
  std::unique_ptr<TestServer> gpu = TestServer::Start({}, *std::move(gpu_backend));
  std::unique_ptr<TestServer> cpu = TestServer::Start();
  const ServerCase& c = GetParam();

  // The source tree may have moved (a bundle run on a GPU host): the
  // environment can say where it is now.
  const char* source_dir = std::getenv("CONVSERVE_SOURCE_DIR");
  absl::StatusOr<v1::GraphDef> graph =
      ReadGraphFile(std::string(source_dir != nullptr ? source_dir : CONVSERVE_SOURCE_DIR) +
                    "/deploy/examples/resnet_block.textproto");
  ASSERT_TRUE(graph.ok()) << graph.status();
  graph->set_data_type(c.type);
  graph->set_layout(c.layout);
  ASSERT_TRUE(FillParameters(3, true, &*graph).ok());

  v1::InferRequest request;
  request.set_graph(graph->name());
  for (int64_t d : {4, 3, 56, 56}) request.mutable_input()->add_shape(d);
  request.mutable_input()->set_data(RandomTensorBytes(c.type, 4 * 3 * 56 * 56, 17));

  std::string outputs[2];
  TestServer* servers[2] = {cpu.get(), gpu.get()};
  for (int i = 0; i < 2; ++i) {
    ClientOptions options;
    options.address = servers[i]->address();
    ConvServeClient client(options);
    ASSERT_TRUE(client.LoadGraph(*graph).ok());
    absl::StatusOr<v1::InferResponse> response = client.Infer(request);
    ASSERT_TRUE(response.ok()) << response.status();
    outputs[i] = response->output().data();
  }
  const DType dtype = c.type == v1::FLOAT16    ? DType::kFloat16
                      : c.type == v1::BFLOAT16 ? DType::kBFloat16
                                               : DType::kFloat32;
  const double error =
      RelativeL2Error(DecodeToDouble(dtype, outputs[1]), DecodeToDouble(dtype, outputs[0]));
  std::printf("%s: GPU server vs CPU server relative L2 error %.3e (bound %.0e)\n", c.name, error,
              c.bound);
  EXPECT_LE(error, c.bound);
}

INSTANTIATE_TEST_SUITE_P(Examples, GpuServerTest,
                         ::testing::Values(ServerCase{"Float32Nchw", v1::FLOAT32, v1::NCHW, 1e-3},
                                           ServerCase{"Float16Nhwc", v1::FLOAT16, v1::NHWC, 1e-2},
                                           ServerCase{"BFloat16Nhwc", v1::BFLOAT16, v1::NHWC,
                                                      1e-2}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace convserve
