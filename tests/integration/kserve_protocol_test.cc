// The KServe v2 protocol (inference.GRPCInferenceService) as a KServe or
// Triton client sees it, checked against the server's own convserve.v1 calls
// over a real loopback gRPC server: health and metadata, the model view of a
// graph (version "1", "input"/"output", dims in byte order) and ModelInfer
// giving exactly the bytes convserve.v1 Infer gives.
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/version.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// One of the graph shapes the protocol is checked on.
struct ModelKind {
  // Test instance name.
  std::string name;
  v1::DataType data_type;
  v1::Layout layout;
  // "FP32", "FP16", "BF16".
  std::string kserve_datatype;
  // Logical N, C, spatial... of the input sent.
  std::vector<int64_t> input_shape;
  // Relative L2 bound against the double-precision reference.
  double tolerance;
};

void PrintTo(const ModelKind& kind, std::ostream* os) { *os << kind.name; }

constexpr int kInputChannels = 3;
constexpr int kHiddenChannels = 8;
constexpr int kOutputChannels = 5;

// C=3 -> 3x3 pad 1 (K=8, relu) -> 3x3 stride 2 (K=5, tanh), in the given
// spatial rank, with parameters drawn from `seed`.
v1::GraphDef TwoLayerGraph(const std::string& name, v1::DataType data_type, v1::Layout layout,
                           uint64_t seed = 1) {
  const int rank = (layout == v1::NCDHW || layout == v1::NDHWC) ? 3 : 2;
  v1::GraphDef graph;
  graph.set_name(name);
  graph.set_data_type(data_type);
  graph.set_layout(layout);
  graph.set_input_channels(kInputChannels);
  v1::ConvLayer* first = graph.add_layers();
  first->set_name("expand");
  first->set_out_channels(kHiddenChannels);
  first->mutable_activation()->set_kind(v1::Activation::RELU);
  v1::ConvLayer* second = graph.add_layers();
  second->set_name("reduce");
  second->set_out_channels(kOutputChannels);
  second->mutable_activation()->set_kind(v1::Activation::TANH);
  for (int d = 0; d < rank; ++d) {
    first->add_kernel_size(3);
    first->add_pad_before(1);
    first->add_pad_after(1);
    second->add_kernel_size(3);
    second->add_stride(2);
  }
  const absl::Status filled = FillParameters(seed, /*with_bias=*/true, &graph);
  EXPECT_TRUE(filled.ok()) << filled;
  return graph;
}

int64_t NumElementsOf(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  return count;
}

// N, C, S... -> N, S..., C when the layout is channels-last.
std::vector<int64_t> ByteOrderShape(const std::vector<int64_t>& logical, v1::Layout layout) {
  if (layout != v1::NHWC && layout != v1::NDHWC) return logical;
  std::vector<int64_t> physical = {logical[0]};
  physical.insert(physical.end(), logical.begin() + 2, logical.end());
  physical.push_back(logical[1]);
  return physical;
}

inference::ModelInferRequest RawModelInfer(const std::string& model, const std::string& datatype,
                                           const std::vector<int64_t>& byte_order_shape,
                                           std::string bytes) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype(datatype);
  for (int64_t d : byte_order_shape) input->add_shape(d);
  request.add_raw_input_contents(std::move(bytes));
  return request;
}

class KServeProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = TestServer::Start();
    ClientOptions options;
    options.address = server_->address();
    client_ = std::make_unique<ConvServeClient>(options);
    kserve_ = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  std::string Load(const v1::GraphDef& graph) {
    absl::StatusOr<v1::LoadGraphResponse> loaded = client_->LoadGraph(graph);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? loaded->graph_id() : "";
  }

  // The calls ConvServeClient does not wrap.
  bool ServerReady() {
    grpc::ClientContext context;
    inference::ServerReadyResponse response;
    const grpc::Status status =
        kserve_->ServerReady(&context, inference::ServerReadyRequest(), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.ready();
  }

  bool ModelReady(const std::string& name, const std::string& version = "") {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name(name);
    request.set_version(version);
    inference::ModelReadyResponse response;
    const grpc::Status status = kserve_->ModelReady(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.ready();
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<ConvServeClient> client_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve_;
};

TEST_F(KServeProtocolTest, ServerIsLiveAndReady) {
  absl::StatusOr<bool> live = client_->ServerLive();
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_TRUE(*live);
  EXPECT_TRUE(ServerReady());
}

TEST_F(KServeProtocolTest, DrainingServerIsLiveButNotReady) {
  Load(TwoLayerGraph("model", v1::FLOAT32, v1::NCHW));
  ASSERT_TRUE(ModelReady("model"));
  server_->core()->Drain();
  absl::StatusOr<bool> live = client_->ServerLive();
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_TRUE(*live);
  EXPECT_FALSE(ServerReady());
  EXPECT_FALSE(ModelReady("model"));
}

TEST_F(KServeProtocolTest, ServerMetadataNamesConvserve) {
  grpc::ClientContext context;
  inference::ServerMetadataResponse response;
  const grpc::Status status =
      kserve_->ServerMetadata(&context, inference::ServerMetadataRequest(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.name(), "convserve");
  EXPECT_EQ(response.version(), kConvServeVersion);
}

TEST_F(KServeProtocolTest, ModelReadyOnlyForLoadedModelAndVersionOne) {
  Load(TwoLayerGraph("model", v1::FLOAT32, v1::NCHW));
  EXPECT_TRUE(ModelReady("model"));
  EXPECT_TRUE(ModelReady("model", "1"));
  EXPECT_FALSE(ModelReady("model", "2"));
  EXPECT_FALSE(ModelReady("other_model"));
  EXPECT_FALSE(ModelReady(""));
}

TEST_F(KServeProtocolTest, UnloadedModelIsNotReadyAndNotFound) {
  Load(TwoLayerGraph("model", v1::FLOAT32, v1::NCHW));
  ASSERT_TRUE(ModelReady("model"));
  ASSERT_TRUE(client_->UnloadGraph("model").ok());

  EXPECT_FALSE(ModelReady("model"));
  absl::StatusOr<inference::ModelMetadataResponse> metadata = client_->ModelMetadata("model");
  EXPECT_EQ(metadata.status().code(), absl::StatusCode::kNotFound) << metadata.status();
  const std::vector<int64_t> shape = {1, kInputChannels, 6, 6};
  absl::StatusOr<inference::ModelInferResponse> inferred = client_->ModelInfer(RawModelInfer(
      "model", "FP32", shape, RandomTensorBytes(v1::FLOAT32, NumElementsOf(shape), 1)));
  EXPECT_EQ(inferred.status().code(), absl::StatusCode::kNotFound) << inferred.status();
  EXPECT_THAT(std::string(inferred.status().message()), HasSubstr("model 'model' is not loaded"));
}

TEST_F(KServeProtocolTest, RequestIdIsEchoed) {
  Load(TwoLayerGraph("model", v1::FLOAT32, v1::NCHW));
  const std::vector<int64_t> shape = {1, kInputChannels, 6, 6};
  inference::ModelInferRequest request = RawModelInfer(
      "model", "FP32", shape, RandomTensorBytes(v1::FLOAT32, NumElementsOf(shape), 2));
  request.set_id("request-42");
  absl::StatusOr<inference::ModelInferResponse> response = client_->ModelInfer(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->id(), "request-42");
  EXPECT_EQ(response->model_name(), "model");
  EXPECT_EQ(response->model_version(), "1");
}

TEST_F(KServeProtocolTest, RequestedOutputNamedOutputGivesSameResult) {
  Load(TwoLayerGraph("model", v1::FLOAT32, v1::NCHW));
  const std::vector<int64_t> shape = {1, kInputChannels, 6, 6};
  const inference::ModelInferRequest plain = RawModelInfer(
      "model", "FP32", shape, RandomTensorBytes(v1::FLOAT32, NumElementsOf(shape), 3));
  inference::ModelInferRequest named = plain;
  named.add_outputs()->set_name("output");
  named.set_model_version("1");

  absl::StatusOr<inference::ModelInferResponse> expected = client_->ModelInfer(plain);
  absl::StatusOr<inference::ModelInferResponse> actual = client_->ModelInfer(named);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  ASSERT_EQ(actual->outputs_size(), 1);
  EXPECT_EQ(actual->outputs(0).name(), "output");
  ASSERT_EQ(actual->raw_output_contents_size(), 1);
  EXPECT_TRUE(actual->raw_output_contents(0) == expected->raw_output_contents(0));
}

TEST_F(KServeProtocolTest, Fp32ContentsGiveSameBytesAsRawInput) {
  Load(TwoLayerGraph("model", v1::FLOAT32, v1::NCHW));
  const std::vector<int64_t> shape = {2, kInputChannels, 7, 5};
  const std::string bytes = RandomTensorBytes(v1::FLOAT32, NumElementsOf(shape), 4);
  const inference::ModelInferRequest raw = RawModelInfer("model", "FP32", shape, bytes);
  inference::ModelInferRequest typed = raw;
  typed.clear_raw_input_contents();
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  for (float v : values) typed.mutable_inputs(0)->mutable_contents()->add_fp32_contents(v);

  absl::StatusOr<inference::ModelInferResponse> from_raw = client_->ModelInfer(raw);
  absl::StatusOr<inference::ModelInferResponse> from_typed = client_->ModelInfer(typed);
  ASSERT_TRUE(from_raw.ok()) << from_raw.status();
  ASSERT_TRUE(from_typed.ok()) << from_typed.status();
  ASSERT_EQ(from_typed->raw_output_contents_size(), 1);
  ASSERT_EQ(from_raw->raw_output_contents_size(), 1);
  // 7x5 -> 7x5 -> 3x2, K=5, batch 2.
  EXPECT_EQ(from_typed->raw_output_contents(0).size(), 2u * kOutputChannels * 3 * 2 * 4);
  EXPECT_TRUE(from_typed->raw_output_contents(0) == from_raw->raw_output_contents(0));
  ASSERT_EQ(from_typed->outputs_size(), 1);
  EXPECT_THAT(from_typed->outputs(0).shape(), ElementsAre(2, kOutputChannels, 3, 2));
}

TEST_F(KServeProtocolTest, LoadingIdenticalGraphTwiceReturnsSameId) {
  const v1::GraphDef graph = TwoLayerGraph("model", v1::FLOAT16, v1::NHWC);
  absl::StatusOr<v1::LoadGraphResponse> first = client_->LoadGraph(graph);
  absl::StatusOr<v1::LoadGraphResponse> second = client_->LoadGraph(graph);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(first->already_loaded());
  EXPECT_TRUE(second->already_loaded());
  EXPECT_FALSE(first->graph_id().empty());
  EXPECT_EQ(second->graph_id(), first->graph_id());
  absl::StatusOr<v1::ListGraphsResponse> list = client_->ListGraphs();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->graphs_size(), 1);
}

TEST_F(KServeProtocolTest, ListAndGetGraphReturnMetadataWithoutWeights) {
  v1::GraphDef biased = TwoLayerGraph("a_biased", v1::FLOAT32, v1::NCHW);
  v1::GraphDef partly = TwoLayerGraph("b_partly_biased", v1::FLOAT16, v1::NHWC);
  partly.mutable_layers(1)->clear_bias();
  const std::string biased_id = Load(biased);
  const std::string partly_id = Load(partly);

  absl::StatusOr<v1::ListGraphsResponse> list = client_->ListGraphs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->graphs_size(), 2);
  const v1::GraphInfo& a = list->graphs(0);
  const v1::GraphInfo& b = list->graphs(1);
  EXPECT_EQ(a.id(), biased_id);
  EXPECT_EQ(b.id(), partly_id);
  EXPECT_NE(a.id(), b.id());
  EXPECT_THAT(a.has_bias(), ElementsAre(true, true));
  EXPECT_THAT(b.has_bias(), ElementsAre(true, false));

  const auto parameter_bytes = [](const v1::GraphDef& graph) {
    int64_t bytes = 0;
    for (const v1::ConvLayer& layer : graph.layers()) {
      bytes += layer.weights().size() + layer.bias().size();
    }
    return bytes;
  };
  EXPECT_EQ(a.parameter_bytes(), parameter_bytes(biased));
  EXPECT_EQ(b.parameter_bytes(), parameter_bytes(partly));

  for (const v1::GraphInfo& info : list->graphs()) {
    SCOPED_TRACE(info.definition().name());
    ASSERT_EQ(info.definition().layers_size(), 2);
    for (const v1::ConvLayer& layer : info.definition().layers()) {
      EXPECT_THAT(layer.weights(), IsEmpty());
      EXPECT_THAT(layer.bias(), IsEmpty());
    }
    EXPECT_EQ(info.definition().input_channels(), kInputChannels);
    EXPECT_EQ(info.definition().spatial_rank(), 2);
    const v1::ConvLayer& reduce = info.definition().layers(1);
    EXPECT_EQ(reduce.name(), "reduce");
    EXPECT_EQ(reduce.out_channels(), kOutputChannels);
    EXPECT_THAT(reduce.kernel_size(), ElementsAre(3, 3));
    EXPECT_THAT(reduce.stride(), ElementsAre(2, 2));
    // Defaults come back filled in.
    EXPECT_THAT(reduce.dilation(), ElementsAre(1, 1));
    EXPECT_THAT(reduce.pad_before(), ElementsAre(0, 0));
    EXPECT_EQ(reduce.groups(), 1);
    EXPECT_EQ(reduce.activation().kind(), v1::Activation::TANH);
  }
  EXPECT_EQ(a.definition().data_type(), v1::FLOAT32);
  EXPECT_EQ(a.definition().layout(), v1::NCHW);
  EXPECT_EQ(b.definition().data_type(), v1::FLOAT16);
  EXPECT_EQ(b.definition().layout(), v1::NHWC);

  // GetGraph by name and by id gives the same record as ListGraphs.
  for (const std::string& key : {std::string("b_partly_biased"), partly_id}) {
    absl::StatusOr<v1::GraphInfo> got = client_->GetGraph(key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(MessageDifferencer::Equals(*got, b)) << got->DebugString();
  }
}

class KServeModelTest : public KServeProtocolTest,
                        public ::testing::WithParamInterface<ModelKind> {};

TEST_P(KServeModelTest, MetadataGivesVariableDimsAndChannelsInByteOrder) {
  const ModelKind& kind = GetParam();
  Load(TwoLayerGraph("model", kind.data_type, kind.layout));
  absl::StatusOr<inference::ModelMetadataResponse> metadata = client_->ModelMetadata("model");
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  EXPECT_EQ(metadata->name(), "model");
  EXPECT_THAT(metadata->versions(), ElementsAre("1"));
  EXPECT_EQ(metadata->platform(), "convserve");

  std::vector<int64_t> input_logical(kind.input_shape.size(), -1);
  input_logical[1] = kInputChannels;
  std::vector<int64_t> output_logical(kind.input_shape.size(), -1);
  output_logical[1] = kOutputChannels;
  ASSERT_EQ(metadata->inputs_size(), 1);
  EXPECT_EQ(metadata->inputs(0).name(), "input");
  EXPECT_EQ(metadata->inputs(0).datatype(), kind.kserve_datatype);
  EXPECT_THAT(metadata->inputs(0).shape(),
              ElementsAreArray(ByteOrderShape(input_logical, kind.layout)));
  ASSERT_EQ(metadata->outputs_size(), 1);
  EXPECT_EQ(metadata->outputs(0).name(), "output");
  EXPECT_EQ(metadata->outputs(0).datatype(), kind.kserve_datatype);
  EXPECT_THAT(metadata->outputs(0).shape(),
              ElementsAreArray(ByteOrderShape(output_logical, kind.layout)));
}

TEST_P(KServeModelTest, ModelInferEqualsInferByteForByte) {
  const ModelKind& kind = GetParam();
  const std::string graph_id = Load(TwoLayerGraph("model", kind.data_type, kind.layout));
  const std::string bytes =
      RandomTensorBytes(kind.data_type, NumElementsOf(kind.input_shape), /*seed=*/5);

  v1::InferRequest native;
  native.set_graph("model");
  for (int64_t d : kind.input_shape) native.mutable_input()->add_shape(d);
  native.mutable_input()->set_data_type(kind.data_type);
  native.mutable_input()->set_layout(kind.layout);
  native.mutable_input()->set_data(bytes);
  absl::StatusOr<v1::InferResponse> native_response = client_->Infer(native);
  ASSERT_TRUE(native_response.ok()) << native_response.status();

  absl::StatusOr<inference::ModelInferResponse> kserve_response = client_->ModelInfer(RawModelInfer(
      "model", kind.kserve_datatype, ByteOrderShape(kind.input_shape, kind.layout), bytes));
  ASSERT_TRUE(kserve_response.ok()) << kserve_response.status();

  const v1::Tensor& output = native_response->output();
  EXPECT_EQ(native_response->graph_id(), graph_id);
  EXPECT_EQ(output.data_type(), kind.data_type);
  EXPECT_EQ(output.layout(), kind.layout);
  const std::vector<int64_t> output_shape(output.shape().begin(), output.shape().end());
  ASSERT_EQ(output_shape.size(), kind.input_shape.size());
  EXPECT_EQ(output_shape[0], kind.input_shape[0]);
  EXPECT_EQ(output_shape[1], kOutputChannels);

  ASSERT_EQ(kserve_response->outputs_size(), 1);
  const auto& kserve_output = kserve_response->outputs(0);
  EXPECT_EQ(kserve_output.name(), "output");
  EXPECT_EQ(kserve_output.datatype(), kind.kserve_datatype);
  EXPECT_THAT(kserve_output.shape(), ElementsAreArray(ByteOrderShape(output_shape, kind.layout)));
  ASSERT_EQ(kserve_response->raw_output_contents_size(), 1);
  EXPECT_EQ(kserve_response->raw_output_contents(0).size(), output.data().size());
  EXPECT_TRUE(kserve_response->raw_output_contents(0) == output.data())
      << "ModelInfer and Infer disagree";

  // Both agree with the reference, so the equality is not of two wrong answers.
  absl::StatusOr<std::shared_ptr<const Graph>> graph = server_->core()->FindGraph("model");
  ASSERT_TRUE(graph.ok()) << graph.status();
  Shape reference_shape;
  const std::vector<double> reference =
      NaiveForward(**graph, kind.input_shape, bytes, &reference_shape);
  EXPECT_EQ(reference_shape, Shape(output_shape.begin(), output_shape.end()));
  EXPECT_LT(RelativeL2Error(DecodeToDouble((*graph)->spec().dtype, output.data()), reference),
            kind.tolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Models, KServeModelTest,
    ::testing::Values(ModelKind{"Float32Nchw", v1::FLOAT32, v1::NCHW, "FP32", {2, 3, 9, 7}, 1e-5},
                      ModelKind{"Float16Nhwc", v1::FLOAT16, v1::NHWC, "FP16", {2, 3, 9, 7}, 1e-2},
                      ModelKind{
                          "BFloat16Ndhwc", v1::BFLOAT16, v1::NDHWC, "BF16", {1, 3, 5, 6, 7}, 5e-2}),
    [](const ::testing::TestParamInfo<ModelKind>& info) { return info.param.name; });

}  // namespace
}  // namespace convserve
