// The bad-input matrix: malformed graphs and requests sent through a real
// gRPC server with the C++ client. Each must end with its exact status code
// and a message naming the field to change, and must leave the server as it
// was: after every case the same graphs are loaded and good requests on both
// protocols return the same bytes as before the matrix ran.
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Limits small enough that every limit case is cheap to reach.
constexpr int kMaxGraphs = 4;
constexpr int kMaxLayers = 3;
constexpr int64_t kMaxTensorBytes = 32 << 10;
constexpr int64_t kMaxGraphParameterBytes = 16 << 10;
constexpr int64_t kMaxServerParameterBytes = 24 << 10;

// Loaded for the whole suite; every case must leave them serving.
constexpr char kFloatGraph[] = "served";           // FLOAT32, NCHW
constexpr char kHalfGraph[] = "served_half_nhwc";  // FLOAT16, NHWC
// The name malformed graphs are sent under.
constexpr char kCandidate[] = "candidate";

InferenceCoreOptions SmallLimits() {
  InferenceCoreOptions options;
  options.graph_limits.max_layers = kMaxLayers;
  options.graph_limits.max_tensor_bytes = kMaxTensorBytes;
  options.graph_limits.max_parameter_bytes = kMaxGraphParameterBytes;
  options.registry.max_graphs = kMaxGraphs;
  options.registry.max_parameter_bytes = kMaxServerParameterBytes;
  return options;
}

v1::ConvLayer* AddLayer(v1::GraphDef* graph, int out_channels, int kernel, int pad,
                        v1::Activation::Kind activation) {
  v1::ConvLayer* layer = graph->add_layers();
  layer->set_out_channels(out_channels);
  for (int d = 0; d < 2; ++d) {
    layer->add_kernel_size(kernel);
    layer->add_pad_before(pad);
    layer->add_pad_after(pad);
  }
  layer->mutable_activation()->set_kind(activation);
  return layer;
}

void FillOrDie(uint64_t seed, v1::GraphDef* graph) {
  const absl::Status filled = FillParameters(seed, /*with_bias=*/true, graph);
  ASSERT_TRUE(filled.ok()) << filled;
}

// C=4 -> 3x3 pad 1 (K=8, relu) -> 3x3 no pad (K=2): 8x8 in, 6x6 out.
v1::GraphDef FloatGraph() {
  v1::GraphDef graph;
  graph.set_name(kFloatGraph);
  graph.set_data_type(v1::FLOAT32);
  graph.set_layout(v1::NCHW);
  graph.set_input_channels(4);
  AddLayer(&graph, 8, 3, 1, v1::Activation::RELU);
  AddLayer(&graph, 2, 3, 0, v1::Activation::IDENTITY);
  FillOrDie(1, &graph);
  return graph;
}

// C=4 -> 3x3 pad 1 (K=4, swish), channels-last half precision.
v1::GraphDef HalfGraph() {
  v1::GraphDef graph;
  graph.set_name(kHalfGraph);
  graph.set_data_type(v1::FLOAT16);
  graph.set_layout(v1::NHWC);
  graph.set_input_channels(4);
  AddLayer(&graph, 4, 3, 1, v1::Activation::SWISH);
  FillOrDie(2, &graph);
  return graph;
}

// A valid graph without parameters; malformed cases change one thing in it.
v1::GraphDef CandidateGraph() {
  v1::GraphDef graph;
  graph.set_name(kCandidate);
  graph.set_data_type(v1::FLOAT32);
  graph.set_layout(v1::NCHW);
  graph.set_input_channels(4);
  AddLayer(&graph, 4, 3, 1, v1::Activation::RELU);
  return graph;
}

// Fills what is still empty. Malformed sizes make filling fail part-way; the
// server must reject such a graph anyway, so that failure is not the test's.
v1::GraphDef Filled(v1::GraphDef graph, uint64_t seed = 3) {
  FillParameters(seed, /*with_bias=*/true, &graph).IgnoreError();
  return graph;
}

std::string FloatBytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

v1::InferRequest FloatInfer() {
  v1::InferRequest request;
  request.set_graph(kFloatGraph);
  v1::Tensor* input = request.mutable_input();
  for (int64_t d : {1, 4, 8, 8}) input->add_shape(d);
  input->set_data(RandomTensorBytes(v1::FLOAT32, 4 * 8 * 8, 7));
  return request;
}

// A v1 tensor of `shape` with as many bytes as the shape needs.
void SetFloatInput(std::vector<int64_t> shape, v1::InferRequest* request) {
  v1::Tensor* input = request->mutable_input();
  input->clear_shape();
  int64_t count = 1;
  for (int64_t d : shape) {
    input->add_shape(d);
    count *= d;
  }
  input->set_data(RandomTensorBytes(v1::FLOAT32, count, 11));
}

inference::ModelInferRequest HalfModelInfer() {
  inference::ModelInferRequest request;
  request.set_model_name(kHalfGraph);
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP16");
  for (int64_t d : {1, 8, 8, 4}) input->add_shape(d);
  request.add_raw_input_contents(RandomTensorBytes(v1::FLOAT16, 8 * 8 * 4, 8));
  return request;
}

inference::ModelInferRequest FloatModelInfer() {
  inference::ModelInferRequest request;
  request.set_model_name(kFloatGraph);
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t d : {1, 4, 8, 8}) input->add_shape(d);
  request.add_raw_input_contents(RandomTensorBytes(v1::FLOAT32, 4 * 8 * 8, 9));
  return request;
}

void SetModelShape(std::vector<int64_t> shape, inference::ModelInferRequest* request) {
  auto* input = request->mutable_inputs(0);
  input->clear_shape();
  for (int64_t d : shape) input->add_shape(d);
}

// The server, its clients and what good requests returned before any case.
struct Suite {
  std::unique_ptr<TestServer> server;
  std::unique_ptr<ConvServeClient> client;
  // For requests the client cannot express (no graph, a model version,
  // bytes that are not a message).
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::ConvServe::Stub> convserve_stub;
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve_stub;
  std::string float_output;
  std::string half_output;
};

absl::Status LoadWithoutGraph(Suite& suite) {
  grpc::ClientContext context;
  v1::LoadGraphResponse response;
  return FromGrpcStatus(
      suite.convserve_stub->LoadGraph(&context, v1::LoadGraphRequest(), &response));
}

// `bytes` as a LoadGraph request, through gRPC's generic stub (the typed
// stub can only send a LoadGraphRequest), waited for on this thread.
absl::Status LoadGraphBytes(Suite& suite, const std::string& bytes) {
  grpc::GenericStub stub(suite.channel);
  grpc::ClientContext context;
  grpc::CompletionQueue queue;
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> call =
      stub.PrepareUnaryCall(&context, "/convserve.v1.ConvServe/LoadGraph", request, &queue);
  call->StartCall();
  call->Finish(&response, &status, &status);
  void* tag = nullptr;
  bool ok = false;
  const bool finished = queue.Next(&tag, &ok) && tag == &status && ok;
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  if (!finished) return absl::InternalError("the generic LoadGraph call did not complete");
  return FromGrpcStatus(status);
}

absl::Status ModelMetadataVersion(Suite& suite, const std::string& name,
                                  const std::string& version) {
  grpc::ClientContext context;
  inference::ModelMetadataRequest request;
  request.set_name(name);
  request.set_version(version);
  inference::ModelMetadataResponse response;
  return FromGrpcStatus(suite.kserve_stub->ModelMetadata(&context, request, &response));
}

struct BadInputCase {
  // Test instance name: Rpc_Problem.
  std::string name;
  // Sends the malformed request; undoes whatever setup it did first.
  std::function<absl::Status(Suite&)> send;
  absl::StatusCode code;
  // Names the problem: usually the field, e.g. "layers[0].kernel_size".
  std::string message_part;
};

// gtest prints a failing parameter with this instead of its raw bytes.
void PrintTo(const BadInputCase& c, std::ostream* os) { *os << c.name; }

BadInputCase LoadGraphCase(std::string name, std::function<void(v1::GraphDef*)> change,
                           absl::StatusCode code, std::string message_part) {
  return {std::move(name),
          [change](Suite& suite) {
            v1::GraphDef graph = CandidateGraph();
            change(&graph);
            return suite.client->LoadGraph(Filled(graph)).status();
          },
          code, std::move(message_part)};
}

BadInputCase InferCase(std::string name, std::function<void(v1::InferRequest*)> change,
                       absl::StatusCode code, std::string message_part) {
  return {std::move(name),
          [change](Suite& suite) {
            v1::InferRequest request = FloatInfer();
            change(&request);
            return suite.client->Infer(request).status();
          },
          code, std::move(message_part)};
}

// `change` starts from HalfModelInfer(); it may replace the request whole.
BadInputCase ModelInferCase(std::string name,
                            std::function<void(inference::ModelInferRequest*)> change,
                            absl::StatusCode code, std::string message_part) {
  return {std::move(name),
          [change](Suite& suite) {
            inference::ModelInferRequest request = HalfModelInfer();
            change(&request);
            return suite.client->ModelInfer(request).status();
          },
          code, std::move(message_part)};
}

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kNotFound = absl::StatusCode::kNotFound;
constexpr absl::StatusCode kExhausted = absl::StatusCode::kResourceExhausted;
constexpr absl::StatusCode kExists = absl::StatusCode::kAlreadyExists;

std::vector<BadInputCase> LoadGraphCases() {
  using G = v1::GraphDef;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  return {
      {"LoadGraph_MissingGraph", LoadWithoutGraph, kInvalid, "graph is required"},
      // Field 1 (graph) whose length runs past the end of the message.
      {"LoadGraph_BytesNotALoadGraphRequest",
       [](Suite& suite) { return LoadGraphBytes(suite, std::string("\x0a\x10\x0a\x01", 4)); },
       kInvalid, "the request is not a valid convserve.v1.LoadGraphRequest"},
      LoadGraphCase("LoadGraph_MissingName", [](G* g) { g->clear_name(); }, kInvalid,
                    "name is required"),
      LoadGraphCase("LoadGraph_BadNameChars", [](G* g) { g->set_name("my graph/1"); }, kInvalid,
                    "name 'my graph/1' may hold only letters"),
      LoadGraphCase("LoadGraph_NameTooLong", [](G* g) { g->set_name(std::string(200, 'a')); },
                    kInvalid, "name is 200 characters; at most 128"),
      // Filled before the data type goes: FillParameters needs a valid one.
      LoadGraphCase("LoadGraph_UnspecifiedDataType",
                    [](G* g) {
                      *g = Filled(*g);
                      g->clear_data_type();
                    },
                    kInvalid, "data_type is required"),
      LoadGraphCase("LoadGraph_UnknownDataType",
                    [](G* g) {
                      *g = Filled(*g);
                      g->set_data_type(static_cast<v1::DataType>(42));
                    },
                    kInvalid, "data_type has unknown value 42"),
      LoadGraphCase("LoadGraph_UnspecifiedLayout", [](G* g) { g->clear_layout(); }, kInvalid,
                    "layout is required"),
      LoadGraphCase("LoadGraph_UnknownLayout",
                    [](G* g) { g->set_layout(static_cast<v1::Layout>(9)); }, kInvalid,
                    "layout has unknown value 9"),
      LoadGraphCase("LoadGraph_UnknownActivationKind",
                    [](G* g) {
                      g->mutable_layers(0)->mutable_activation()->set_kind(
                          static_cast<v1::Activation::Kind>(99));
                    },
                    kInvalid, "layers[0].activation.kind has unknown value 99"),
      LoadGraphCase("LoadGraph_SpatialRankVsLayout", [](G* g) { g->set_spatial_rank(3); },
                    kInvalid, "spatial_rank is 3 but layout NCHW has 2"),
      LoadGraphCase("LoadGraph_ZeroInputChannels", [](G* g) { g->set_input_channels(0); },
                    kInvalid, "input_channels must be in [1, "),
      LoadGraphCase("LoadGraph_NoLayers", [](G* g) { g->clear_layers(); }, kInvalid,
                    "layers must hold at least one layer"),
      LoadGraphCase("LoadGraph_TooManyLayers",
                    [](G* g) {
                      for (int i = 0; i < kMaxLayers; ++i) {
                        AddLayer(g, 4, 1, 0, v1::Activation::IDENTITY);
                      }
                    },
                    kInvalid, "layers has 4 layers; at most 3 allowed"),
      LoadGraphCase("LoadGraph_ZeroOutChannels",
                    [](G* g) { g->mutable_layers(0)->set_out_channels(0); }, kInvalid,
                    "layers[0].out_channels must be in [1, 65536], got 0"),
      LoadGraphCase("LoadGraph_NegativeOutChannels",
                    [](G* g) { g->mutable_layers(0)->set_out_channels(-3); }, kInvalid,
                    "layers[0].out_channels must be in [1, 65536], got -3"),
      LoadGraphCase("LoadGraph_MissingKernelSize",
                    [](G* g) { g->mutable_layers(0)->clear_kernel_size(); }, kInvalid,
                    "layers[0].kernel_size is required (2 entries)"),
      LoadGraphCase("LoadGraph_KernelSizeWrongCount",
                    [](G* g) { g->mutable_layers(0)->add_kernel_size(3); }, kInvalid,
                    "layers[0].kernel_size has 3 entries; the graph has 2 spatial dims"),
      LoadGraphCase("LoadGraph_ZeroKernelSize",
                    [](G* g) { g->mutable_layers(0)->set_kernel_size(1, 0); }, kInvalid,
                    "layers[0].kernel_size[1] must be in [1, 64], got 0"),
      LoadGraphCase("LoadGraph_KernelSizeTooBig",
                    [](G* g) { g->mutable_layers(0)->set_kernel_size(0, 65); }, kInvalid,
                    "layers[0].kernel_size[0] must be in [1, 64], got 65"),
      LoadGraphCase("LoadGraph_ZeroStride",
                    [](G* g) {
                      g->mutable_layers(0)->add_stride(1);
                      g->mutable_layers(0)->add_stride(0);
                    },
                    kInvalid, "layers[0].stride[1] must be in [1, 64], got 0"),
      LoadGraphCase("LoadGraph_ZeroDilation",
                    [](G* g) {
                      g->mutable_layers(0)->add_dilation(0);
                      g->mutable_layers(0)->add_dilation(1);
                    },
                    kInvalid, "layers[0].dilation[0] must be in [1, 64], got 0"),
      LoadGraphCase("LoadGraph_NegativePadding",
                    [](G* g) { g->mutable_layers(0)->set_pad_before(0, -1); }, kInvalid,
                    "layers[0].pad_before[0] must be in [0, 256], got -1"),
      LoadGraphCase("LoadGraph_PadAfterWrongCount",
                    [](G* g) { g->mutable_layers(0)->mutable_pad_after()->RemoveLast(); },
                    kInvalid, "layers[0].pad_after has 1 entries"),
      LoadGraphCase("LoadGraph_GroupsNotDividingChannels",
                    [](G* g) { g->mutable_layers(0)->set_groups(3); }, kInvalid,
                    "layers[0].groups (3) must divide the layer's input channels (4)"),
      LoadGraphCase("LoadGraph_GroupsNotDividingOutChannels",
                    [](G* g) {
                      g->mutable_layers(0)->set_groups(2);
                      g->mutable_layers(0)->set_out_channels(3);
                    },
                    kInvalid, "layers[0].groups (2) must divide out_channels (3)"),
      LoadGraphCase("LoadGraph_GroupsAboveChannels",
                    [](G* g) { g->mutable_layers(0)->set_groups(8); }, kInvalid,
                    "layers[0].groups must be in [1, 4] (the layer's input channels), got 8"),
      LoadGraphCase("LoadGraph_NegativeGroups",
                    [](G* g) { g->mutable_layers(0)->set_groups(-2); }, kInvalid,
                    "layers[0].groups must be in [1, 4]"),
      LoadGraphCase("LoadGraph_WeightsTooShort",
                    [](G* g) { g->mutable_layers(0)->set_weights(FloatBytes({1.0f})); },
                    kInvalid, "layers[0].weights has 4 bytes, expected 576"),
      LoadGraphCase("LoadGraph_WeightsTooLong",
                    [](G* g) {
                      *g = Filled(*g);
                      g->mutable_layers(0)->mutable_weights()->append(4, '\0');
                    },
                    kInvalid, "layers[0].weights has 580 bytes, expected 576"),
      LoadGraphCase("LoadGraph_WeightsOfWrongDataType",
                    [](G* g) {
                      *g = Filled(*g);  // float32 weights...
                      g->set_data_type(v1::FLOAT16);  // ...for a float16 graph
                    },
                    kInvalid, "layers[0].weights has 576 bytes, expected 288"),
      LoadGraphCase("LoadGraph_SecondLayerWeightsWrong",
                    [](G* g) {
                      AddLayer(g, 2, 1, 0, v1::Activation::IDENTITY)
                          ->set_weights(FloatBytes({1.0f, 2.0f, 3.0f}));
                    },
                    kInvalid, "layers[1].weights has 12 bytes, expected 32 (K=2 x C/groups=4"),
      LoadGraphCase("LoadGraph_BiasWrongSize",
                    [](G* g) { g->mutable_layers(0)->set_bias(std::string(3, '\0')); },
                    kInvalid, "layers[0].bias has 3 bytes, expected 16"),
      LoadGraphCase("LoadGraph_NanWeight",
                    [nan](G* g) {
                      *g = Filled(*g);
                      std::memcpy(g->mutable_layers(0)->mutable_weights()->data() + 5 * 4, &nan,
                                  sizeof(float));
                    },
                    kInvalid, "layers[0].weights holds a non-finite value at element 5"),
      LoadGraphCase("LoadGraph_InfiniteBias",
                    [inf](G* g) {
                      *g = Filled(*g);
                      std::memcpy(g->mutable_layers(0)->mutable_bias()->data(), &inf,
                                  sizeof(float));
                    },
                    kInvalid, "layers[0].bias holds a non-finite value at element 0"),
      LoadGraphCase("LoadGraph_ReluZeroUpperClip",
                    [](G* g) { g->mutable_layers(0)->mutable_activation()->set_upper_clip(0); },
                    kInvalid, "layers[0].activation.upper_clip must be finite and > 0"),
      LoadGraphCase("LoadGraph_ReluNanSlope",
                    [nan](G* g) {
                      g->mutable_layers(0)->mutable_activation()->set_negative_slope(nan);
                    },
                    kInvalid, "layers[0].activation.negative_slope must be finite"),
      LoadGraphCase("LoadGraph_UpperClipOnTanh",
                    [](G* g) {
                      v1::Activation* a = g->mutable_layers(0)->mutable_activation();
                      a->set_kind(v1::Activation::TANH);
                      a->set_upper_clip(6);
                    },
                    kInvalid,
                    "layers[0].activation upper_clip and negative_slope apply to relu only, "
                    "not tanh"),
      LoadGraphCase("LoadGraph_AlphaOnRelu",
                    [](G* g) { g->mutable_layers(0)->mutable_activation()->set_alpha(1); },
                    kInvalid, "layers[0].activation.alpha applies to elu only, not relu"),
      LoadGraphCase("LoadGraph_BetaOnElu",
                    [](G* g) {
                      v1::Activation* a = g->mutable_layers(0)->mutable_activation();
                      a->set_kind(v1::Activation::ELU);
                      a->set_beta(2);
                    },
                    kInvalid, "layers[0].activation.beta applies to softplus and swish only"),
      LoadGraphCase("LoadGraph_SwishZeroBeta",
                    [](G* g) {
                      v1::Activation* a = g->mutable_layers(0)->mutable_activation();
                      a->set_kind(v1::Activation::SWISH);
                      a->set_beta(0);
                    },
                    kInvalid, "layers[0].activation.beta must be finite and non-zero, got 0"),
      LoadGraphCase("LoadGraph_EluInfiniteAlpha",
                    [inf](G* g) {
                      v1::Activation* a = g->mutable_layers(0)->mutable_activation();
                      a->set_kind(v1::Activation::ELU);
                      a->set_alpha(inf);
                    },
                    kInvalid, "layers[0].activation.alpha must be finite"),
      // 128 x 4 x 3 x 3 floats + 128 bias = 18944 bytes > 16 KiB per graph.
      LoadGraphCase("LoadGraph_ParametersOverGraphLimit",
                    [](G* g) { g->mutable_layers(0)->set_out_channels(128); }, kExhausted,
                    "graph parameters take 18944 bytes; at most 16384 allowed"),
      // Two graphs of 14208 bytes each pass the server's 24 KiB in total.
      {"LoadGraph_ParametersOverServerLimit",
       [](Suite& suite) {
         v1::GraphDef big = CandidateGraph();
         big.mutable_layers(0)->set_out_channels(96);
         big.set_name("big_a");
         absl::Status first = suite.client->LoadGraph(Filled(big)).status();
         if (!first.ok()) return first;
         big.set_name("big_b");
         absl::Status second = suite.client->LoadGraph(Filled(big)).status();
         suite.client->UnloadGraph("big_a").IgnoreError();
         return second;
       },
       kExhausted, "would pass the server's limit of 24576"},
      {"LoadGraph_NameTakenByDifferentGraph",
       [](Suite& suite) {
         v1::GraphDef other = FloatGraph();
         other.mutable_layers(0)->clear_weights();
         return suite.client->LoadGraph(Filled(other, /*seed=*/99)).status();
       },
       kExists, "graph name 'served' is taken by graph"},
      {"LoadGraph_TooManyGraphs",
       [](Suite& suite) {
         std::vector<std::string> loaded;
         absl::Status status;
         // Two graphs are served; the third filler passes kMaxGraphs.
         for (int i = 0; i < 3 && status.ok(); ++i) {
           v1::GraphDef filler = CandidateGraph();
           filler.set_name(absl::StrCat("filler_", i));
           status = suite.client->LoadGraph(Filled(filler)).status();
           if (status.ok()) loaded.push_back(filler.name());
         }
         for (const std::string& name : loaded) suite.client->UnloadGraph(name).IgnoreError();
         return loaded.size() == 2 ? status : absl::InternalError("fillers did not load");
       },
       kExhausted, "the server holds its limit of 4 graphs"},
  };
}

std::vector<BadInputCase> InferCases() {
  using R = v1::InferRequest;
  return {
      InferCase("Infer_UnknownGraph", [](R* r) { r->set_graph("no_such_graph"); }, kNotFound,
                "no graph named or with id 'no_such_graph'"),
      InferCase("Infer_EmptyGraphName", [](R* r) { r->clear_graph(); }, kInvalid,
                "graph is required"),
      InferCase("Infer_MissingInput", [](R* r) { r->clear_input(); }, kInvalid,
                "input is required"),
      InferCase("Infer_MissingShape", [](R* r) { r->mutable_input()->clear_shape(); }, kInvalid,
                "input.shape is required"),
      InferCase("Infer_RankMismatch", [](R* r) { SetFloatInput({1, 4, 64}, r); }, kInvalid,
                "input shape [1, 4, 64] has 3 dims; graph 'served' takes 4"),
      InferCase("Infer_WrongChannels", [](R* r) { SetFloatInput({1, 3, 8, 8}, r); }, kInvalid,
                "has C = 3; graph 'served' takes C = 4"),
      InferCase("Infer_ZeroBatch", [](R* r) { r->mutable_input()->set_shape(0, 0); }, kInvalid,
                "input shape [0, 4, 8, 8] has dim 0 = 0"),
      InferCase("Infer_ZeroDim", [](R* r) { r->mutable_input()->set_shape(2, 0); }, kInvalid,
                "input shape [1, 4, 0, 8] has dim 2 = 0"),
      InferCase("Infer_NegativeDim", [](R* r) { r->mutable_input()->set_shape(3, -8); },
                kInvalid, "input shape [1, 4, 8, -8] has dim 3 = -8"),
      InferCase("Infer_InputSmallerThanKernel", [](R* r) { SetFloatInput({1, 4, 2, 2}, r); },
                kInvalid, "input shape [1, 4, 2, 2] is too small: layers[1]"),
      InferCase("Infer_DataTooShort", [](R* r) { r->mutable_input()->mutable_data()->pop_back(); },
                kInvalid, "input data holds 1023 bytes; shape [1, 4, 8, 8] of float32 needs 1024"),
      InferCase("Infer_DataTooLong",
                [](R* r) { r->mutable_input()->mutable_data()->append(4, '\0'); }, kInvalid,
                "input data holds 1028 bytes"),
      InferCase("Infer_EmptyData", [](R* r) { r->mutable_input()->clear_data(); }, kInvalid,
                "input data holds 0 bytes"),
      InferCase("Infer_WrongDataType", [](R* r) { r->mutable_input()->set_data_type(v1::FLOAT16); },
                kInvalid, "input.data_type is FLOAT16; graph 'served' takes FLOAT32"),
      InferCase("Infer_UnknownDataType",
                [](R* r) { r->mutable_input()->set_data_type(static_cast<v1::DataType>(42)); },
                kInvalid, "input.data_type is unknown value 42"),
      InferCase("Infer_WrongLayout", [](R* r) { r->mutable_input()->set_layout(v1::NHWC); },
                kInvalid, "input.layout is NHWC; graph 'served' takes NCHW"),
      InferCase("Infer_UnknownLayout",
                [](R* r) { r->mutable_input()->set_layout(static_cast<v1::Layout>(9)); },
                kInvalid, "input.layout is unknown value 9"),
      // 4 x 48 x 48 floats = 36864 bytes > 32 KiB.
      InferCase("Infer_TensorOverLimit", [](R* r) { SetFloatInput({1, 4, 48, 48}, r); },
                kExhausted, "input tensor [1, 4, 48, 48] exceeds the limit of 32768 bytes"),
      // The 25600-byte input fits; layer 0's 8 x 40 x 40 floats do not.
      InferCase("Infer_LayerOutputOverLimit", [](R* r) { SetFloatInput({1, 4, 40, 40}, r); },
                kExhausted, "layers[0] output [1, 8, 40, 40] exceeds the limit"),
      // Dims whose product overflows int64 must not wrap to a small size.
      InferCase("Infer_OverflowingDims",
                [](R* r) {
                  r->mutable_input()->set_shape(2, int64_t{1} << 40);
                  r->mutable_input()->set_shape(3, int64_t{1} << 40);
                },
                kExhausted, "input tensor [1, 4, 1099511627776, 1099511627776] exceeds"),
  };
}

std::vector<BadInputCase> AdminAndMetadataCases() {
  return {
      {"GetGraph_UnknownGraph",
       [](Suite& suite) { return suite.client->GetGraph("no_such_graph").status(); }, kNotFound,
       "no graph named or with id 'no_such_graph'"},
      {"GetGraph_EmptyName", [](Suite& suite) { return suite.client->GetGraph("").status(); },
       kInvalid, "graph is required"},
      {"UnloadGraph_UnknownGraph",
       [](Suite& suite) { return suite.client->UnloadGraph("no_such_graph"); }, kNotFound,
       "no graph named or with id 'no_such_graph'"},
      {"UnloadGraph_EmptyName", [](Suite& suite) { return suite.client->UnloadGraph(""); },
       kInvalid, "graph is required"},
      {"ModelMetadata_UnknownModel",
       [](Suite& suite) { return suite.client->ModelMetadata("no_such_model").status(); },
       kNotFound, "model 'no_such_model' is not loaded"},
      {"ModelMetadata_UnknownVersion",
       [](Suite& suite) { return ModelMetadataVersion(suite, kHalfGraph, "2"); }, kNotFound,
       "model 'served_half_nhwc' has no version '2'"},
      {"ModelMetadata_EmptyName",
       [](Suite& suite) { return suite.client->ModelMetadata("").status(); }, kInvalid,
       "model name is required"},
  };
}

std::vector<BadInputCase> ModelInferCases() {
  using R = inference::ModelInferRequest;
  return {
      ModelInferCase("ModelInfer_UnknownModel", [](R* r) { r->set_model_name("no_such_model"); },
                     kNotFound, "model 'no_such_model' is not loaded"),
      ModelInferCase("ModelInfer_UnknownVersion", [](R* r) { r->set_model_version("2"); },
                     kNotFound, "has no version '2'; its only version is '1'"),
      ModelInferCase("ModelInfer_EmptyModelName", [](R* r) { r->clear_model_name(); }, kInvalid,
                     "model name is required"),
      ModelInferCase("ModelInfer_NoInputs", [](R* r) { r->clear_inputs(); }, kInvalid,
                     "inputs holds 0 tensors; the model takes exactly one, named 'input'"),
      ModelInferCase("ModelInfer_TwoInputs",
                     [](R* r) {
                       *r->add_inputs() = r->inputs(0);
                       r->add_raw_input_contents(r->raw_input_contents(0));
                     },
                     kInvalid, "inputs holds 2 tensors"),
      ModelInferCase("ModelInfer_WrongInputName",
                     [](R* r) { r->mutable_inputs(0)->set_name("x"); }, kInvalid,
                     "inputs[0].name is 'x'; the model's input is 'input'"),
      ModelInferCase("ModelInfer_WrongDatatype",
                     [](R* r) { r->mutable_inputs(0)->set_datatype("FP32"); }, kInvalid,
                     "inputs[0].datatype is 'FP32'; model 'served_half_nhwc' takes FP16"),
      ModelInferCase("ModelInfer_UnknownDatatype",
                     [](R* r) { r->mutable_inputs(0)->set_datatype("FLOAT16"); }, kInvalid,
                     "inputs[0].datatype is 'FLOAT16'"),
      ModelInferCase("ModelInfer_ShapeRankMismatch", [](R* r) { SetModelShape({1, 8, 8}, r); },
                     kInvalid, "inputs[0].shape [1, 8, 8] has 3 dims; model 'served_half_nhwc' "
                               "takes 4 in NHWC order"),
      ModelInferCase("ModelInfer_ChannelsFirstShapeOnNhwcModel",
                     [](R* r) { SetModelShape({1, 4, 8, 8}, r); }, kInvalid,
                     "inputs[0].shape [1, 4, 8, 8] has C = 8 at dim 3 (NHWC order)"),
      ModelInferCase("ModelInfer_NegativeDim", [](R* r) { SetModelShape({1, 8, -1, 4}, r); },
                     kInvalid, "inputs[0].shape [1, 8, -1, 4] has dim 2 = -1"),
      ModelInferCase("ModelInfer_ZeroDim", [](R* r) { SetModelShape({1, 0, 8, 4}, r); },
                     kInvalid, "inputs[0].shape [1, 0, 8, 4] has dim 1 = 0"),
      ModelInferCase("ModelInfer_TwoRawContents",
                     [](R* r) { r->add_raw_input_contents(r->raw_input_contents(0)); }, kInvalid,
                     "raw_input_contents holds 2 entries"),
      ModelInferCase("ModelInfer_RawAndTypedContents",
                     [](R* r) {
                       r->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
                     },
                     kInvalid, "inputs[0].contents must be empty when raw_input_contents"),
      ModelInferCase("ModelInfer_MissingContents", [](R* r) { r->clear_raw_input_contents(); },
                     kInvalid, "raw_input_contents is empty"),
      ModelInferCase("ModelInfer_Fp32ContentsOnHalfModel",
                     [](R* r) {
                       r->clear_raw_input_contents();
                       auto* contents = r->mutable_inputs(0)->mutable_contents();
                       for (int i = 0; i < 8 * 8 * 4; ++i) contents->add_fp32_contents(0.5f);
                     },
                     kInvalid, "inputs[0].contents is for FP32 models only"),
      ModelInferCase("ModelInfer_RawContentsWrongSize",
                     [](R* r) { r->mutable_raw_input_contents(0)->resize(510); }, kInvalid,
                     "input data holds 510 bytes; shape [1, 4, 8, 8] of float16 needs 512"),
      ModelInferCase("ModelInfer_UnknownRequestedOutput",
                     [](R* r) { r->add_outputs()->set_name("probs"); }, kInvalid,
                     "outputs[0].name is 'probs'; the model's only output is 'output'"),
      // 80 x 80 x 4 halves = 51200 bytes > 32 KiB.
      ModelInferCase("ModelInfer_TensorOverLimit",
                     [](R* r) {
                       SetModelShape({1, 80, 80, 4}, r);
                       r->set_raw_input_contents(0, std::string(80 * 80 * 4 * 2, '\0'));
                     },
                     kExhausted, "input tensor [1, 4, 80, 80] exceeds the limit of 32768"),
      ModelInferCase("ModelInfer_Fp32ContentsWrongCount",
                     [](R* r) {
                       *r = FloatModelInfer();
                       r->clear_raw_input_contents();
                       auto* contents = r->mutable_inputs(0)->mutable_contents();
                       for (int i = 0; i < 4 * 8 * 8 - 1; ++i) contents->add_fp32_contents(0.5f);
                     },
                     kInvalid, "input data holds 1020 bytes; shape [1, 4, 8, 8] of float32"),
      ModelInferCase("ModelInfer_IntContentsOnFloatModel",
                     [](R* r) {
                       *r = FloatModelInfer();
                       r->clear_raw_input_contents();
                       r->mutable_inputs(0)->mutable_contents()->add_int_contents(1);
                     },
                     kInvalid, "inputs[0].contents holds no fp32_contents"),
  };
}

std::vector<BadInputCase> AllCases() {
  std::vector<BadInputCase> cases;
  for (auto* group : {LoadGraphCases, InferCases, AdminAndMetadataCases, ModelInferCases}) {
    for (BadInputCase& c : group()) cases.push_back(std::move(c));
  }
  return cases;
}

class BadInputTest : public ::testing::TestWithParam<BadInputCase> {
 protected:
  static void SetUpTestSuite() {
    suite_ = new Suite;
    suite_->server = TestServer::Start(SmallLimits());
    const std::string address = suite_->server->address();
    ClientOptions options;
    options.address = address;
    suite_->client = std::make_unique<ConvServeClient>(options);
    suite_->channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    suite_->convserve_stub = v1::ConvServe::NewStub(suite_->channel);
    suite_->kserve_stub = inference::GRPCInferenceService::NewStub(suite_->channel);
  }

  static void TearDownTestSuite() {
    delete suite_;
    suite_ = nullptr;
  }

  // Loads the served graphs once and records what good requests return,
  // checked against the reference so the baseline itself is right.
  void SetUp() override {
    if (!suite_->float_output.empty()) return;
    for (const v1::GraphDef& graph : {FloatGraph(), HalfGraph()}) {
      absl::StatusOr<v1::LoadGraphResponse> loaded = suite_->client->LoadGraph(graph);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
    }
    const v1::InferRequest request = FloatInfer();
    absl::StatusOr<v1::InferResponse> response = suite_->client->Infer(request);
    ASSERT_TRUE(response.ok()) << response.status();
    absl::StatusOr<std::shared_ptr<const Graph>> graph =
        suite_->server->core()->FindGraph(kFloatGraph);
    ASSERT_TRUE(graph.ok()) << graph.status();
    Shape expected_shape;
    const std::vector<double> expected =
        NaiveForward(**graph, {1, 4, 8, 8}, request.input().data(), &expected_shape);
    ASSERT_EQ(expected_shape, Shape({1, 2, 6, 6}));
    EXPECT_LT(RelativeL2Error(DecodeToDouble(DType::kFloat32, response->output().data()),
                              expected),
              1e-5);

    absl::StatusOr<inference::ModelInferResponse> model_response =
        suite_->client->ModelInfer(HalfModelInfer());
    ASSERT_TRUE(model_response.ok()) << model_response.status();
    ASSERT_EQ(model_response->raw_output_contents_size(), 1);
    ASSERT_EQ(model_response->raw_output_contents(0).size(), 8u * 8 * 4 * 2);

    suite_->float_output = response->output().data();
    suite_->half_output = model_response->raw_output_contents(0);
  }

  // The server holds exactly the served graphs and answers good requests on
  // both protocols with the bytes it gave before the matrix.
  void ExpectStillServes() {
    absl::StatusOr<v1::ListGraphsResponse> list = suite_->client->ListGraphs();
    ASSERT_TRUE(list.ok()) << list.status();
    std::vector<std::string> names;
    for (const v1::GraphInfo& info : list->graphs()) names.push_back(info.definition().name());
    EXPECT_THAT(names, ElementsAre(kFloatGraph, kHalfGraph));

    absl::StatusOr<v1::InferResponse> response = suite_->client->Infer(FloatInfer());
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_THAT(response->output().shape(), ElementsAre(1, 2, 6, 6));
    EXPECT_EQ(response->output().data().size(), 2u * 6 * 6 * sizeof(float));
    EXPECT_TRUE(response->output().data() == suite_->float_output)
        << "the float graph's output changed";

    absl::StatusOr<inference::ModelInferResponse> model_response =
        suite_->client->ModelInfer(HalfModelInfer());
    ASSERT_TRUE(model_response.ok()) << model_response.status();
    ASSERT_EQ(model_response->outputs_size(), 1);
    EXPECT_THAT(model_response->outputs(0).shape(), ElementsAre(1, 8, 8, 4));
    ASSERT_EQ(model_response->raw_output_contents_size(), 1);
    EXPECT_TRUE(model_response->raw_output_contents(0) == suite_->half_output)
        << "the half graph's output changed";
  }

  static Suite* suite_;
};

Suite* BadInputTest::suite_ = nullptr;

TEST_P(BadInputTest, FailsWithCodeAndMessageThenServerStillServes) {
  const BadInputCase& c = GetParam();
  const absl::Status status = c.send(*suite_);
  EXPECT_EQ(status.code(), c.code) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(c.message_part));
  ExpectStillServes();
}

INSTANTIATE_TEST_SUITE_P(Matrix, BadInputTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<BadInputCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace convserve
