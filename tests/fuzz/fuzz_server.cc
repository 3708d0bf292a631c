#include "tests/fuzz/fuzz_server.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "client/graph_file.h"
#include "server/proto_convert.h"

namespace convserve {
namespace {

[[noreturn]] void Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "fuzz server setup: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::abort();
}

v1::ConvLayer* AddLayer(v1::GraphDef* graph, int out_channels, std::vector<int> kernel) {
  v1::ConvLayer* layer = graph->add_layers();
  layer->set_out_channels(out_channels);
  for (int k : kernel) layer->add_kernel_size(k);
  return layer;
}

// Small graphs (the fuzzer runs thousands of requests a second), covering
// each dtype, both channel orders, 2D and 3D, groups, stride and padding.
std::vector<v1::GraphDef> FuzzGraphs() {
  std::vector<v1::GraphDef> graphs(3);
  v1::GraphDef& nchw = graphs[0];
  nchw.set_name(kFuzzGraphNchw);
  nchw.set_data_type(v1::FLOAT32);
  nchw.set_layout(v1::NCHW);
  nchw.set_input_channels(3);
  v1::ConvLayer* layer = AddLayer(&nchw, 4, {3, 3});
  layer->add_pad_before(1);
  layer->add_pad_before(1);
  layer->add_pad_after(1);
  layer->add_pad_after(1);
  layer->mutable_activation()->set_kind(v1::Activation::RELU);

  v1::GraphDef& nhwc = graphs[1];
  nhwc.set_name(kFuzzGraphNhwc);
  nhwc.set_data_type(v1::FLOAT16);
  nhwc.set_layout(v1::NHWC);
  nhwc.set_input_channels(8);
  layer = AddLayer(&nhwc, 8, {1, 1});
  layer->set_groups(2);
  layer->add_stride(2);
  layer->add_stride(2);
  AddLayer(&nhwc, 4, {3, 3})->mutable_activation()->set_kind(v1::Activation::SWISH);

  v1::GraphDef& volume = graphs[2];
  volume.set_name(kFuzzGraph3d);
  volume.set_data_type(v1::BFLOAT16);
  volume.set_layout(v1::NCDHW);
  volume.set_input_channels(2);
  AddLayer(&volume, 2, {1, 3, 3})->mutable_activation()->set_kind(v1::Activation::TANH);
  return graphs;
}

}  // namespace

FuzzServer& FuzzServer::Get() {
  static FuzzServer* const server = [] {
    auto* made = new FuzzServer();
    InferenceCoreOptions options;
    // Small tensors keep a fuzzer's memory and time per input small; the
    // bound itself is part of what is checked.
    options.graph_limits.max_tensor_bytes = int64_t{1} << 20;
    options.max_request_flops = 2e8;
    absl::StatusOr<std::unique_ptr<InferenceCore>> core =
        InferenceCore::Create(options, std::make_unique<ImmediateRunner>());
    if (!core.ok()) Fail("core", core.status());
    made->core_ = *std::move(core);
    for (v1::GraphDef& graph : FuzzGraphs()) {
      absl::Status filled = FillParameters(/*seed=*/7, /*with_bias=*/true, &graph);
      if (!filled.ok()) Fail(graph.name(), filled);
      absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&graph);
      if (!spec.ok()) Fail(graph.name(), spec.status());
      absl::StatusOr<GraphRegistry::AddResult> added = made->core_->LoadGraph(*std::move(spec));
      if (!added.ok()) Fail(graph.name(), added.status());
    }
    ServerMetricsOptions metrics_options;
    metrics_options.listen_address = "";  // no HTTP endpoint
    absl::StatusOr<std::unique_ptr<ServerMetrics>> metrics =
        ServerMetrics::Create(metrics_options, made->core_.get());
    if (!metrics.ok()) Fail("metrics", metrics.status());
    made->metrics_ = *std::move(metrics);
    made->shared_memory_ =
        std::make_unique<SharedMemoryRegistry>(&made->runner(), SharedMemoryLimits{});
    absl::StatusOr<std::unique_ptr<PosixSharedMemory>> object =
        PosixSharedMemory::Create("fuzz", 64 << 10);
    if (!object.ok()) Fail("shared memory object", object.status());
    made->region_object_ = *std::move(object);
    const std::string& key = made->region_object_->key();
    absl::Status registered = made->shared_memory_->RegisterSystem(kFuzzRegion, key, 0, 64 << 10);
    if (registered.ok()) {
      registered = made->shared_memory_->RegisterSystem(kFuzzRegionTail, key, 4096, 8 << 10);
    }
    if (!registered.ok()) Fail("shared memory regions", registered);
    absl::StatusOr<std::unique_ptr<GraphManagementPolicy>> management =
        GraphManagementPolicy::Create(GraphManagementOptions{}, nullptr);
    if (!management.ok()) Fail("graph management", management.status());
    made->management_ = *std::move(management);
    made->kserve_ = std::make_unique<KServeService>(made->core_.get(), made->metrics_.get(),
                                                    made->shared_memory_.get(),
                                                    made->management_.get(), nullptr);
    made->convserve_ = std::make_unique<ConvServeService>(
        made->core_.get(), made->metrics_.get(), made->management_.get());
    return made;
  }();
  return *server;
}

void QuietProtobufLogs() {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int,
                                     const std::string&) {});
}

grpc::ByteBuffer ReceivedBytes(const uint8_t* data, size_t size) {
  const size_t cuts[] = {0, size / 3, 2 * size / 3, size};
  std::vector<grpc::Slice> slices;
  for (int i = 0; i < 3; ++i) {
    if (cuts[i + 1] > cuts[i]) {
      slices.emplace_back(data + cuts[i], cuts[i + 1] - cuts[i]);
    }
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string CanonicalBytes(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}

void CheckClientError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnimplemented:
      std::fprintf(stderr, "a bad request was answered %s\n", status.ToString().c_str());
      std::abort();
    default:
      return;
  }
}

}  // namespace convserve
