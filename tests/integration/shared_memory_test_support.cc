#include "tests/integration/shared_memory_test_support.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "client/graph_file.h"
#include "gmock/gmock.h"

namespace convserve {

std::vector<int64_t> InputShape() { return {2, kInputChannels, 5, 7}; }
std::vector<int64_t> OutputShape() { return {2, kOutputChannels, 2, 3}; }

std::string Unwritten(size_t bytes) { return std::string(bytes, static_cast<char>(kUnwritten)); }

v1::GraphDef SmallGraph(const std::string& name, v1::DataType data_type, v1::Layout layout) {
  v1::GraphDef graph;
  graph.set_name(name);
  graph.set_data_type(data_type);
  graph.set_layout(layout);
  graph.set_input_channels(kInputChannels);
  v1::ConvLayer* first = graph.add_layers();
  first->set_out_channels(4);
  first->mutable_activation()->set_kind(v1::Activation::RELU);
  v1::ConvLayer* second = graph.add_layers();
  second->set_out_channels(kOutputChannels);
  second->mutable_activation()->set_kind(v1::Activation::TANH);
  for (int d = 0; d < 2; ++d) {
    first->add_kernel_size(3);
    first->add_pad_before(1);
    first->add_pad_after(1);
    second->add_kernel_size(3);
    second->add_stride(2);
  }
  const absl::Status filled = FillParameters(/*seed=*/3, /*with_bias=*/true, &graph);
  EXPECT_TRUE(filled.ok()) << filled;
  return graph;
}

int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  return count;
}

std::vector<int64_t> ByteOrder(const std::vector<int64_t>& logical, v1::Layout layout) {
  if (layout != v1::NHWC) return logical;
  return {logical[0], logical[2], logical[3], logical[1]};
}

inference::ModelInferRequest RequestWithoutContents(const std::string& model,
                                                    const std::string& datatype,
                                                    const std::vector<int64_t>& byte_order_shape) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype(datatype);
  for (int64_t d : byte_order_shape) input->add_shape(d);
  return request;
}

void PlaceInRegion(const std::string& region, int64_t byte_size, int64_t offset,
                   KServeParameters* parameters) {
  (*parameters)["shared_memory_region"].set_string_param(region);
  (*parameters)["shared_memory_byte_size"].set_int64_param(byte_size);
  if (offset != 0) (*parameters)["shared_memory_offset"].set_int64_param(offset);
}

KServeParameters* InputParameters(inference::ModelInferRequest* request) {
  return request->mutable_inputs(0)->mutable_parameters();
}

KServeParameters* OutputParameters(inference::ModelInferRequest* request) {
  return request->mutable_outputs(0)->mutable_parameters();
}

std::unique_ptr<PosixSharedMemory> NewObject(const std::string& tag, size_t bytes) {
  absl::StatusOr<std::unique_ptr<PosixSharedMemory>> object =
      PosixSharedMemory::Create(tag, bytes);
  if (!object.ok()) {
    std::fprintf(stderr, "cannot create a POSIX shared memory object: %s\n",
                 object.status().ToString().c_str());
    std::abort();
  }
  return *std::move(object);
}

void ExpectOutputInRegion(const inference::ModelInferResponse& response,
                          const std::string& datatype, const std::vector<int64_t>& shape,
                          const std::string& region, int64_t byte_size, int64_t offset) {
  // One empty entry per output, as Triton sends (its clients index it).
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_TRUE(response.raw_output_contents(0).empty());
  ASSERT_EQ(response.outputs_size(), 1);
  const auto& output = response.outputs(0);
  EXPECT_EQ(output.name(), "output");
  EXPECT_EQ(output.datatype(), datatype);
  EXPECT_THAT(output.shape(), ::testing::ElementsAreArray(shape));
  const KServeParameters& parameters = output.parameters();
  ASSERT_EQ(parameters.count("shared_memory_region"), 1u);
  EXPECT_EQ(parameters.at("shared_memory_region").string_param(), region);
  ASSERT_EQ(parameters.count("shared_memory_byte_size"), 1u);
  EXPECT_EQ(parameters.at("shared_memory_byte_size").int64_param(), byte_size);
  if (offset == 0) {
    EXPECT_EQ(parameters.count("shared_memory_offset"), 0u);
  } else {
    ASSERT_EQ(parameters.count("shared_memory_offset"), 1u);
    EXPECT_EQ(parameters.at("shared_memory_offset").int64_param(), offset);
  }
}

void SharedMemoryTest::SetUp() { StartServer(nullptr, TestServerOptions()); }

void SharedMemoryTest::StartServer(std::unique_ptr<Backend> backend,
                                   const TestServerOptions& options) {
  server_ = TestServer::Start({}, std::move(backend), options);
  ClientOptions client_options;
  client_options.address = server_->address();
  client_options.timeout = absl::ToChronoMilliseconds(kPatience);
  client_ = std::make_unique<ConvServeClient>(client_options);
  kserve_ = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
}

void SharedMemoryTest::Load(const v1::GraphDef& graph) {
  absl::StatusOr<v1::LoadGraphResponse> loaded = client_->LoadGraph(graph);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
}

void SharedMemoryTest::Prepare(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(kPatience));
}

absl::Status SharedMemoryTest::Register(const std::string& name, const std::string& key,
                                        uint64_t offset, uint64_t byte_size) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_offset(offset);
  request.set_byte_size(byte_size);
  inference::SystemSharedMemoryRegisterResponse response;
  return FromGrpcStatus(kserve_->SystemSharedMemoryRegister(&context, request, &response));
}

void SharedMemoryTest::RegisterWhole(const std::string& name, const PosixSharedMemory& object) {
  const absl::Status registered = Register(name, object.key(), 0, object.size());
  ASSERT_TRUE(registered.ok()) << registered;
}

absl::Status SharedMemoryTest::Unregister(const std::string& name) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::SystemSharedMemoryUnregisterRequest request;
  request.set_name(name);
  inference::SystemSharedMemoryUnregisterResponse response;
  return FromGrpcStatus(kserve_->SystemSharedMemoryUnregister(&context, request, &response));
}

absl::StatusOr<inference::SystemSharedMemoryStatusResponse> SharedMemoryTest::Status(
    const std::string& name) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::SystemSharedMemoryStatusRequest request;
  request.set_name(name);
  inference::SystemSharedMemoryStatusResponse response;
  const grpc::Status status = kserve_->SystemSharedMemoryStatus(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

std::vector<std::string> SharedMemoryTest::RegionNames() {
  absl::StatusOr<inference::SystemSharedMemoryStatusResponse> status = Status("");
  EXPECT_TRUE(status.ok()) << status.status();
  std::vector<std::string> names;
  if (status.ok()) {
    for (const auto& [name, region] : status->regions()) names.push_back(name);
  }
  return names;
}

absl::StatusOr<inference::ModelInferResponse> SharedMemoryTest::Infer(
    const inference::ModelInferRequest& request) {
  return client_->ModelInfer(request);
}

std::string SharedMemoryTest::RawOutput(const std::string& model, const std::string& datatype,
                                        const std::vector<int64_t>& byte_order_shape,
                                        const std::string& input) {
  inference::ModelInferRequest request = RequestWithoutContents(model, datatype, byte_order_shape);
  request.add_raw_input_contents(input);
  absl::StatusOr<inference::ModelInferResponse> response = Infer(request);
  EXPECT_TRUE(response.ok()) << response.status();
  if (!response.ok() || response->raw_output_contents_size() != 1) return "";
  return response->raw_output_contents(0);
}

}  // namespace convserve
