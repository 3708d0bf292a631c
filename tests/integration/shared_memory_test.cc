// Triton's system shared-memory extension of the KServe protocol, over a real
// CPU server on loopback, with POSIX shared memory objects the test creates
// as a Triton client would: an input read from a region and an output
// written into one give byte for byte what ModelInfer gives with raw
// contents (every dtype and layout, separate regions or one region at two
// offsets); ServerMetadata, the registry's status and unregistering; and a
// region unregistered while a request uses it stays mapped until that
// request has answered, correctly. Errors and limits:
// shared_memory_errors_test.cc.
#include <grpcpp/client_context.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/shared_memory_test_support.h"
#include "tests/test_util/gated_backend.h"
#include "tests/test_util/posix_shared_memory.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using ::testing::Contains;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

// ---- inputs and outputs in regions, every dtype and layout -----------------

struct ModelKind {
  std::string name;
  v1::DataType data_type;
  v1::Layout layout;
  std::string kserve_datatype;
};

void PrintTo(const ModelKind& kind, std::ostream* os) { *os << kind.name; }

class SharedMemoryInferTest : public SharedMemoryTest,
                              public ::testing::WithParamInterface<ModelKind> {
 protected:
  void SetUp() override {
    SharedMemoryTest::SetUp();
    const ModelKind& kind = GetParam();
    Load(SmallGraph("model", kind.data_type, kind.layout));
    shape_ = ByteOrder(InputShape(), kind.layout);
    input_ = RandomTensorBytes(kind.data_type, ElementCount(InputShape()), /*seed=*/11);
    expected_ = RawOutput("model", kind.kserve_datatype, shape_, input_);
    ASSERT_FALSE(expected_.empty());
    output_shape_ = ByteOrder(OutputShape(), kind.layout);
    ASSERT_EQ(expected_.size(),
              ElementCount(output_shape_) * static_cast<size_t>(ElementSize(kind.data_type)));
  }

  inference::ModelInferRequest ShmRequest() const {
    return RequestWithoutContents("model", GetParam().kserve_datatype, shape_);
  }

  std::vector<int64_t> shape_;         // the input's, in byte order
  std::vector<int64_t> output_shape_;  // in byte order
  std::string input_;
  // What ModelInfer answers for `input_` in raw_input_contents.
  std::string expected_;
};

TEST_P(SharedMemoryInferTest, InputAndOutputInSeparateRegionsGiveRawBytes) {
  std::unique_ptr<PosixSharedMemory> in = NewObject("in", input_.size());
  // Larger than the output, which is fine; the rest must stay untouched.
  std::unique_ptr<PosixSharedMemory> out = NewObject("out", expected_.size() + 64);
  in->Write(0, input_);
  out->Fill(0, out->size(), kUnwritten);
  RegisterWhole("input_region", *in);
  RegisterWhole("output_region", *out);

  inference::ModelInferRequest request = ShmRequest();
  PlaceInRegion("input_region", input_.size(), 0, request.mutable_inputs(0)->mutable_parameters());
  auto* output = request.add_outputs();
  output->set_name("output");
  PlaceInRegion("output_region", out->size(), 0, output->mutable_parameters());
  absl::StatusOr<inference::ModelInferResponse> response = Infer(request);
  ASSERT_TRUE(response.ok()) << response.status();

  ExpectOutputInRegion(*response, GetParam().kserve_datatype, output_shape_, "output_region",
                       expected_.size(), 0);
  EXPECT_TRUE(out->Read(0, expected_.size()) == expected_) << "the region's output differs";
  EXPECT_TRUE(out->Read(expected_.size(), 64) == Unwritten(64)) << "written past the output";
  EXPECT_TRUE(in->Read(0, input_.size()) == input_) << "the input region changed";
}

TEST_P(SharedMemoryInferTest, OneRegionHoldsInputAndOutputAtTwoOffsets) {
  // The region starts 100 bytes into the object (not on a page boundary);
  // the input lies 8 bytes into it, the output at the next multiple of 64
  // after the input, in a range 32 bytes larger than the output.
  constexpr size_t kRegionStart = 100;
  constexpr size_t kInputAt = 8;
  const size_t output_at = (kInputAt + input_.size() + 63) / 64 * 64;
  const size_t region_size = output_at + expected_.size() + 32;
  std::unique_ptr<PosixSharedMemory> object = NewObject("both", kRegionStart + region_size + 50);
  object->Fill(0, object->size(), kUnwritten);
  object->Write(kRegionStart + kInputAt, input_);
  const absl::Status registered = Register("both", object->key(), kRegionStart, region_size);
  ASSERT_TRUE(registered.ok()) << registered;

  inference::ModelInferRequest request = ShmRequest();
  PlaceInRegion("both", input_.size(), kInputAt, request.mutable_inputs(0)->mutable_parameters());
  auto* output = request.add_outputs();
  output->set_name("output");
  PlaceInRegion("both", region_size - output_at, output_at, output->mutable_parameters());
  absl::StatusOr<inference::ModelInferResponse> response = Infer(request);
  ASSERT_TRUE(response.ok()) << response.status();

  ExpectOutputInRegion(*response, GetParam().kserve_datatype, output_shape_, "both",
                       expected_.size(), output_at);
  EXPECT_TRUE(object->Read(kRegionStart + output_at, expected_.size()) == expected_)
      << "the region's output differs";
  EXPECT_TRUE(object->Read(kRegionStart + kInputAt, input_.size()) == input_)
      << "the input changed";
  // Every byte outside the input and the output is as it was.
  const size_t input_end = kRegionStart + kInputAt + input_.size();
  const size_t output_end = kRegionStart + output_at + expected_.size();
  EXPECT_TRUE(object->Read(0, kRegionStart + kInputAt) == Unwritten(kRegionStart + kInputAt));
  EXPECT_TRUE(object->Read(input_end, kRegionStart + output_at - input_end) ==
              Unwritten(kRegionStart + output_at - input_end));
  EXPECT_TRUE(object->Read(output_end, object->size() - output_end) ==
              Unwritten(object->size() - output_end));
}

TEST_P(SharedMemoryInferTest, InputInRegionOutputInResponse) {
  std::unique_ptr<PosixSharedMemory> in = NewObject("in", input_.size());
  in->Write(0, input_);
  RegisterWhole("input_region", *in);

  inference::ModelInferRequest request = ShmRequest();
  PlaceInRegion("input_region", input_.size(), 0, request.mutable_inputs(0)->mutable_parameters());
  request.add_outputs()->set_name("output");
  absl::StatusOr<inference::ModelInferResponse> response = Infer(request);
  ASSERT_TRUE(response.ok()) << response.status();

  ASSERT_EQ(response->raw_output_contents_size(), 1);
  EXPECT_TRUE(response->raw_output_contents(0) == expected_) << "the output differs";
  ASSERT_EQ(response->outputs_size(), 1);
  EXPECT_THAT(response->outputs(0).shape(), ElementsAreArray(output_shape_));
  EXPECT_EQ(response->outputs(0).parameters().count("shared_memory_region"), 0u);
}

TEST_P(SharedMemoryInferTest, InputInRequestOutputInRegion) {
  std::unique_ptr<PosixSharedMemory> out = NewObject("out", expected_.size());
  out->Fill(0, out->size(), kUnwritten);
  RegisterWhole("output_region", *out);

  inference::ModelInferRequest request = ShmRequest();
  request.add_raw_input_contents(input_);
  auto* output = request.add_outputs();
  output->set_name("output");
  PlaceInRegion("output_region", expected_.size(), 0, output->mutable_parameters());
  absl::StatusOr<inference::ModelInferResponse> response = Infer(request);
  ASSERT_TRUE(response.ok()) << response.status();

  ExpectOutputInRegion(*response, GetParam().kserve_datatype, output_shape_, "output_region",
                       expected_.size(), 0);
  EXPECT_TRUE(out->Read(0, expected_.size()) == expected_) << "the region's output differs";
}

INSTANTIATE_TEST_SUITE_P(
    Models, SharedMemoryInferTest,
    ::testing::Values(ModelKind{"Float32Nchw", v1::FLOAT32, v1::NCHW, "FP32"},
                      ModelKind{"Float32Nhwc", v1::FLOAT32, v1::NHWC, "FP32"},
                      ModelKind{"Float16Nchw", v1::FLOAT16, v1::NCHW, "FP16"},
                      ModelKind{"Float16Nhwc", v1::FLOAT16, v1::NHWC, "FP16"},
                      ModelKind{"BFloat16Nchw", v1::BFLOAT16, v1::NCHW, "BF16"},
                      ModelKind{"BFloat16Nhwc", v1::BFLOAT16, v1::NHWC, "BF16"}),
    [](const ::testing::TestParamInfo<ModelKind>& info) { return info.param.name; });

// ---- the registry: metadata, status, unregister -----------------------------

TEST_F(SharedMemoryTest, ServerMetadataListsSystemSharedMemoryOnlyOnCpu) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::ServerMetadataResponse response;
  const grpc::Status status =
      kserve_->ServerMetadata(&context, inference::ServerMetadataRequest(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.extensions(), Contains("system_shared_memory"));
  EXPECT_THAT(response.extensions(), Not(Contains("cuda_shared_memory")));
}

TEST_F(SharedMemoryTest, StatusListsAndFiltersRegions) {
  std::unique_ptr<PosixSharedMemory> a = NewObject("a", 4096);
  std::unique_ptr<PosixSharedMemory> b = NewObject("b", 3 * 4096);
  ASSERT_TRUE(Register("alpha", a->key(), 0, 4096).ok());
  // Two regions over one object.
  ASSERT_TRUE(Register("beta", b->key(), 4096, 2 * 4096 - 10).ok());
  ASSERT_TRUE(Register("gamma", b->key(), 100, 200).ok());

  absl::StatusOr<inference::SystemSharedMemoryStatusResponse> all = Status("");
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->regions_size(), 3);
  const auto expect_region = [&](const std::string& name, const std::string& key,
                                 uint64_t offset, uint64_t byte_size) {
    SCOPED_TRACE(name);
    ASSERT_EQ(all->regions().count(name), 1u);
    const auto& region = all->regions().at(name);
    EXPECT_EQ(region.name(), name);
    EXPECT_EQ(region.key(), key);
    EXPECT_EQ(region.offset(), offset);
    EXPECT_EQ(region.byte_size(), byte_size);
  };
  expect_region("alpha", a->key(), 0, 4096);
  expect_region("beta", b->key(), 4096, 2 * 4096 - 10);
  expect_region("gamma", b->key(), 100, 200);

  absl::StatusOr<inference::SystemSharedMemoryStatusResponse> one = Status("beta");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->regions_size(), 1);
  EXPECT_EQ(one->regions().at("beta").key(), b->key());
  EXPECT_EQ(one->regions().at("beta").offset(), 4096u);

  absl::StatusOr<inference::SystemSharedMemoryStatusResponse> unknown = Status("delta");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("'delta'"));

  // System regions are not CUDA regions (and a CPU server has none of those).
  grpc::ClientContext context;
  Prepare(&context);
  inference::CudaSharedMemoryStatusResponse cuda;
  ASSERT_TRUE(
      kserve_->CudaSharedMemoryStatus(&context, inference::CudaSharedMemoryStatusRequest(), &cuda)
          .ok());
  EXPECT_EQ(cuda.regions_size(), 0);
}

TEST_F(SharedMemoryTest, UnregisterOneThenAll) {
  std::unique_ptr<PosixSharedMemory> object = NewObject("object", 3 * 4096);
  for (const char* name : {"alpha", "beta", "gamma"}) RegisterWhole(name, *object);
  ASSERT_THAT(RegionNames(), UnorderedElementsAre("alpha", "beta", "gamma"));

  ASSERT_TRUE(Unregister("beta").ok());
  EXPECT_THAT(RegionNames(), UnorderedElementsAre("alpha", "gamma"));
  EXPECT_EQ(Status("beta").status().code(), absl::StatusCode::kNotFound);
  // The name is free again.
  RegisterWhole("beta", *object);
  EXPECT_THAT(RegionNames(), UnorderedElementsAre("alpha", "beta", "gamma"));

  // The test's mapping and one per region.
  ASSERT_EQ(object->MappingsInProcess(), 4);

  ASSERT_TRUE(Unregister("").ok());
  EXPECT_THAT(RegionNames(), IsEmpty());
  EXPECT_TRUE(Unregister("").ok()) << "unregistering all of none is no error";
  // With no request using them, the server unmapped every region before it
  // answered: only the test's own mapping is left.
  EXPECT_EQ(object->MappingsInProcess(), 1);
}

// ---- unregistering a region a request uses ------------------------------------

TEST_F(SharedMemoryTest, UnregisterWhileARequestUsesTheRegionLetsItFinish) {
  auto gate = std::make_shared<BackendGate>();
  GatedBackendOptions gated;
  gated.run = gate;
  StartServer(GatedBackend::AroundCpu(gated), TestServerOptions());
  // Every exit opens the gate before joining: a failed assertion must not
  // leave the request held.
  absl::Cleanup open_gate = [gate] { gate->Open(); };
  const v1::GraphDef graph = SmallGraph("model", v1::FLOAT32, v1::NCHW);
  Load(graph);
  const std::string input = RandomTensorBytes(v1::FLOAT32, ElementCount(InputShape()), 7);
  // The expected output, from an ungated server (this one holds every run).
  std::string expected;
  {
    std::unique_ptr<TestServer> reference = TestServer::Start();
    ClientOptions options;
    options.address = reference->address();
    ConvServeClient client(options);
    ASSERT_TRUE(client.LoadGraph(graph).ok());
    inference::ModelInferRequest raw = RequestWithoutContents("model", "FP32", InputShape());
    raw.add_raw_input_contents(input);
    absl::StatusOr<inference::ModelInferResponse> response = client.ModelInfer(raw);
    ASSERT_TRUE(response.ok()) << response.status();
    expected = response->raw_output_contents(0);
  }
  ASSERT_EQ(expected.size(), static_cast<size_t>(kFloat32OutputBytes));

  std::unique_ptr<PosixSharedMemory> in = NewObject("held_in", input.size());
  std::unique_ptr<PosixSharedMemory> out = NewObject("held_out", expected.size());
  in->Write(0, input);
  out->Fill(0, out->size(), kUnwritten);
  RegisterWhole("held_in", *in);
  RegisterWhole("held_out", *out);
  // The test's mapping and the server's.
  ASSERT_EQ(in->MappingsInProcess(), 2);
  ASSERT_EQ(out->MappingsInProcess(), 2);

  inference::ModelInferRequest request = RequestWithoutContents("model", "FP32", InputShape());
  PlaceInRegion("held_in", kFloat32InputBytes, 0, InputParameters(&request));
  request.add_outputs()->set_name("output");
  PlaceInRegion("held_out", kFloat32OutputBytes, 0, OutputParameters(&request));
  absl::StatusOr<inference::ModelInferResponse> held_response;
  absl::Notification answered;
  std::thread caller([&] {
    held_response = Infer(request);
    answered.Notify();
  });
  absl::Cleanup join_caller = [&] {
    gate->Open();
    caller.join();
  };
  ASSERT_TRUE(gate->AwaitHeld(1, kPatience)) << "the request never reached the backend";

  // Unregistering answers at once (it does not wait for the request), by
  // name and by "all".
  ASSERT_TRUE(Unregister("held_in").ok());
  ASSERT_TRUE(Unregister("").ok());
  EXPECT_THAT(RegionNames(), IsEmpty());
  // New requests no longer find the regions...
  const absl::StatusOr<inference::ModelInferResponse> after = Infer(request);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kNotFound) << after.status();
  EXPECT_THAT(std::string(after.status().message()), HasSubstr("'held_in'"));
  // ... while the held one still has both mapped, and has not answered.
  EXPECT_EQ(in->MappingsInProcess(), 2);
  EXPECT_EQ(out->MappingsInProcess(), 2);
  EXPECT_FALSE(answered.HasBeenNotified());
  EXPECT_TRUE(out->Read(0, out->size()) == Unwritten(out->size()));

  gate->Open();
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(kPatience));
  ASSERT_TRUE(held_response.ok()) << held_response.status();
  ExpectOutputInRegion(*held_response, "FP32", OutputShape(), "held_out",
                       kFloat32OutputBytes, 0);
  EXPECT_TRUE(out->Read(0, out->size()) == expected) << "the held request's output differs";

  // Once the request is done the server unmaps both (bounded polling: the
  // worker lets go just after the answer is sent).
  for (const absl::Time give_up = absl::Now() + kPatience;
       (in->MappingsInProcess() > 1 || out->MappingsInProcess() > 1) && absl::Now() < give_up;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(in->MappingsInProcess(), 1);
  EXPECT_EQ(out->MappingsInProcess(), 1);
  const absl::StatusOr<inference::ModelInferResponse> later = Infer(request);
  EXPECT_EQ(later.status().code(), absl::StatusCode::kNotFound) << later.status();
  std::printf("held request answered OK after both regions were unregistered; a new request got "
              "%s; the server unmapped the regions after the answer\n",
              absl::StatusCodeToString(after.status().code()).c_str());
}

}  // namespace
}  // namespace convserve
