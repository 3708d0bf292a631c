// Every way a shared-memory registration or request can be wrong, over a
// real CPU server: each ends with its exact status code and a message naming
// the region, key or parameter to change, registers nothing, writes nothing
// into the output region, and leaves the server serving the good request;
// and the limits on regions (--max_shared_memory_regions, _bytes).
#include <fcntl.h>
#include <grpcpp/client_context.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/shared_memory_test_support.h"
#include "tests/test_util/posix_shared_memory.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// ---- registration errors ----------------------------------------------------

TEST_F(SharedMemoryTest, RegisterTakenNameIsAlreadyExistsAndKeepsTheRegion) {
  std::unique_ptr<PosixSharedMemory> first = NewObject("first", 4096);
  std::unique_ptr<PosixSharedMemory> second = NewObject("second", 4096);
  RegisterWhole("taken", *first);
  const absl::Status again = Register("taken", second->key(), 0, 4096);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_THAT(std::string(again.message()), HasSubstr("'taken'"));
  absl::StatusOr<inference::SystemSharedMemoryStatusResponse> status = Status("taken");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->regions().at("taken").key(), first->key());
}

TEST_F(SharedMemoryTest, RegisterUnknownKeyIsNotFound) {
  const std::string key = "/convserve_test_no_such_object_" + std::to_string(getpid());
  const absl::Status registered = Register("nowhere", key, 0, 64);
  EXPECT_EQ(registered.code(), absl::StatusCode::kNotFound) << registered;
  EXPECT_THAT(std::string(registered.message()), HasSubstr("'" + key + "'"));
  EXPECT_THAT(RegionNames(), IsEmpty());
}

TEST_F(SharedMemoryTest, RegisterRangePastTheObjectIsInvalidArgument) {
  std::unique_ptr<PosixSharedMemory> object = NewObject("small", 1000);
  struct Range {
    uint64_t offset, byte_size;
  };
  for (const Range range : {Range{0, 1001}, Range{1, 1000}, Range{600, 401}, Range{1001, 1},
                            Range{std::numeric_limits<uint64_t>::max(), 2},
                            Range{8, uint64_t{1} << 30}}) {
    SCOPED_TRACE(testing::Message() << "offset " << range.offset << " byte_size "
                                    << range.byte_size);
    const absl::Status registered = Register("past", object->key(), range.offset,
                                             range.byte_size);
    EXPECT_EQ(registered.code(), absl::StatusCode::kInvalidArgument) << registered;
    EXPECT_THAT(std::string(registered.message()), HasSubstr("'past'"));
    EXPECT_THAT(std::string(registered.message()), HasSubstr("'" + object->key() + "'"));
  }
  EXPECT_THAT(RegionNames(), IsEmpty());
  // The whole object, and its last byte alone, are fine.
  EXPECT_TRUE(Register("whole", object->key(), 0, 1000).ok());
  EXPECT_TRUE(Register("last", object->key(), 999, 1).ok());
}

TEST_F(SharedMemoryTest, RegisterWithoutNameOrBytesIsInvalidArgument) {
  std::unique_ptr<PosixSharedMemory> object = NewObject("object", 4096);
  const absl::Status empty = Register("empty", object->key(), 0, 0);
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument) << empty;
  EXPECT_THAT(std::string(empty.message()), HasSubstr("byte_size"));
  const absl::Status nameless = Register("", object->key(), 0, 4096);
  EXPECT_EQ(nameless.code(), absl::StatusCode::kInvalidArgument) << nameless;
  EXPECT_THAT(std::string(nameless.message()), HasSubstr("name"));
  EXPECT_THAT(RegionNames(), IsEmpty());
}

TEST_F(SharedMemoryTest, CudaRegisterOnCpuServerIsFailedPrecondition) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::CudaSharedMemoryRegisterRequest request;
  request.set_name("device_region");
  request.set_raw_handle(std::string(64, '\1'));  // a cudaIpcMemHandle_t's size
  request.set_device_id(0);
  request.set_byte_size(4096);
  inference::CudaSharedMemoryRegisterResponse response;
  const absl::Status registered =
      FromGrpcStatus(kserve_->CudaSharedMemoryRegister(&context, request, &response));
  EXPECT_EQ(registered.code(), absl::StatusCode::kFailedPrecondition) << registered;
  EXPECT_THAT(std::string(registered.message()), HasSubstr("GPU"));
  EXPECT_THAT(std::string(registered.message()), HasSubstr("system shared memory"));
}

TEST_F(SharedMemoryTest, UnregisterUnknownIsNotFound) {
  const absl::Status system = Unregister("never_registered");
  EXPECT_EQ(system.code(), absl::StatusCode::kNotFound) << system;
  EXPECT_THAT(std::string(system.message()), HasSubstr("'never_registered'"));

  // A system region is not a CUDA one: CUDA unregister does not find it
  // and leaves it registered.
  std::unique_ptr<PosixSharedMemory> object = NewObject("object", 4096);
  RegisterWhole("system_region", *object);
  grpc::ClientContext context;
  Prepare(&context);
  inference::CudaSharedMemoryUnregisterRequest request;
  request.set_name("system_region");
  inference::CudaSharedMemoryUnregisterResponse response;
  const absl::Status cuda =
      FromGrpcStatus(kserve_->CudaSharedMemoryUnregister(&context, request, &response));
  EXPECT_EQ(cuda.code(), absl::StatusCode::kNotFound) << cuda;
  EXPECT_THAT(std::string(cuda.message()), HasSubstr("'system_region'"));
  EXPECT_THAT(RegionNames(), UnorderedElementsAre("system_region"));
}

// ---- limits -------------------------------------------------------------------

constexpr int kMaxRegions = 2;
constexpr int64_t kMaxRegionBytes = 3 * 4096;

class SharedMemoryLimitTest : public SharedMemoryTest {
 protected:
  void SetUp() override {
    TestServerOptions options;
    options.shared_memory.max_regions = kMaxRegions;
    options.shared_memory.max_bytes = kMaxRegionBytes;
    StartServer(nullptr, options);
  }
};

TEST_F(SharedMemoryLimitTest, RegionPastTheCountIsResourceExhausted) {
  std::unique_ptr<PosixSharedMemory> object = NewObject("object", 4096);
  ASSERT_TRUE(Register("one", object->key(), 0, 1).ok());
  ASSERT_TRUE(Register("two", object->key(), 0, 1).ok());
  const absl::Status third = Register("three", object->key(), 0, 1);
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_THAT(std::string(third.message()), HasSubstr("--max_shared_memory_regions"));
  EXPECT_THAT(RegionNames(), UnorderedElementsAre("one", "two"));

  ASSERT_TRUE(Unregister("one").ok());
  EXPECT_TRUE(Register("three", object->key(), 0, 1).ok()) << "room after an unregister";
}

TEST_F(SharedMemoryLimitTest, BytesPastTheTotalAreResourceExhausted) {
  std::unique_ptr<PosixSharedMemory> object = NewObject("object", 4 * 4096);
  ASSERT_TRUE(Register("big", object->key(), 0, 2 * 4096).ok());
  const absl::Status over = Register("over", object->key(), 0, 4096 + 1);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_THAT(std::string(over.message()), HasSubstr("--max_shared_memory_bytes"));
  EXPECT_THAT(RegionNames(), UnorderedElementsAre("big"));
  // Exactly up to the limit is fine.
  EXPECT_TRUE(Register("rest", object->key(), 0, 4096).ok());
  // A region larger than the whole budget never fits.
  ASSERT_TRUE(Unregister("").ok());
  const absl::Status huge = Register("huge", object->key(), 0, 4 * 4096);
  EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted) << huge;
}

// ---- request errors -----------------------------------------------------------

// One malformed shared-memory request: how to spoil a good one, and the
// answer it must get.
struct RequestErrorCase {
  std::string name;
  std::function<void(inference::ModelInferRequest*)> spoil;
  absl::StatusCode code;
  // Substrings of the message: what to change.
  std::vector<std::string> message_has;
};

void PrintTo(const RequestErrorCase& c, std::ostream* os) { *os << c.name; }

// The good request: FP32 NCHW input in region "in" (exactly its bytes, at
// the start of a region with room to spare) and output in region "out"
// (exactly its bytes).
constexpr int64_t kInputRegionBytes = kFloat32InputBytes + 64;

std::vector<RequestErrorCase> RequestErrorCases() {
  using InferRequest = inference::ModelInferRequest;
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  constexpr auto kNotFound = absl::StatusCode::kNotFound;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return {
      {"UnknownInputRegion",
       [](InferRequest* r) {
         (*InputParameters(r))["shared_memory_region"].set_string_param("nope");
       },
       kNotFound, {"shared memory region 'nope' is not registered"}},
      {"UnknownOutputRegion",
       [](InferRequest* r) {
         (*OutputParameters(r))["shared_memory_region"].set_string_param("nope");
       },
       kNotFound, {"shared memory region 'nope' is not registered"}},
      {"InputPastRegionEnd",
       [](InferRequest* r) {
         (*InputParameters(r))["shared_memory_offset"].set_int64_param(kInputRegionBytes -
                                                                       kFloat32InputBytes + 4);
       },
       kInvalid, {"past the end of region 'in'", "shared_memory_offset 68"}},
      {"InputOffsetPastRegionEnd",
       [](InferRequest* r) { (*InputParameters(r))["shared_memory_offset"].set_int64_param(kMax); },
       kInvalid, {"past the end of region 'in'"}},
      {"InputByteSizePastRegionEnd",
       [](InferRequest* r) {
         (*InputParameters(r))["shared_memory_offset"].set_int64_param(8);
         (*InputParameters(r))["shared_memory_byte_size"].set_int64_param(kMax);
       },
       kInvalid, {"past the end of region 'in'"}},
      {"OutputPastRegionEnd",
       [](InferRequest* r) { (*OutputParameters(r))["shared_memory_offset"].set_int64_param(4); },
       kInvalid, {"past the end of region 'out'", "shared_memory_offset 4"}},
      {"InputByteSizeBelowTensor",
       [](InferRequest* r) {
         (*InputParameters(r))["shared_memory_byte_size"].set_int64_param(kFloat32InputBytes - 4);
       },
       kInvalid, {"shared_memory_byte_size", "836 bytes", "needs 840"}},
      {"InputByteSizeAboveTensor",
       [](InferRequest* r) {
         (*InputParameters(r))["shared_memory_byte_size"].set_int64_param(kFloat32InputBytes + 4);
       },
       kInvalid, {"shared_memory_byte_size", "844 bytes", "needs 840"}},
      {"OutputRegionBelowOutput",
       [](InferRequest* r) {
         (*OutputParameters(r))["shared_memory_byte_size"].set_int64_param(kFloat32OutputBytes - 1);
       },
       kInvalid, {"shared_memory_byte_size", "239 bytes", "needs 240"}},
      {"InputWithoutByteSize",
       [](InferRequest* r) { InputParameters(r)->erase("shared_memory_byte_size"); }, kInvalid,
       {"inputs[0].parameters[shared_memory_byte_size] is required"}},
      {"OutputWithoutByteSize",
       [](InferRequest* r) { OutputParameters(r)->erase("shared_memory_byte_size"); }, kInvalid,
       {"outputs[0].parameters[shared_memory_byte_size] is required"}},
      {"ZeroByteSize",
       [](InferRequest* r) {
         (*InputParameters(r))["shared_memory_byte_size"].set_int64_param(0);
       },
       kInvalid, {"inputs[0].parameters[shared_memory_byte_size]", "> 0"}},
      {"ByteSizeAsString",
       [](InferRequest* r) {
         (*OutputParameters(r))["shared_memory_byte_size"].set_string_param("240");
       },
       kInvalid, {"outputs[0].parameters[shared_memory_byte_size]", "int64_param"}},
      {"NegativeOffset",
       [](InferRequest* r) { (*InputParameters(r))["shared_memory_offset"].set_int64_param(-8); },
       kInvalid, {"inputs[0].parameters[shared_memory_offset] must be an int64_param >= 0"}},
      {"OffsetAsString",
       [](InferRequest* r) { (*InputParameters(r))["shared_memory_offset"].set_string_param("8"); },
       kInvalid, {"inputs[0].parameters[shared_memory_offset] must be an int64_param >= 0"}},
      {"OutputOffsetAsBool",
       [](InferRequest* r) { (*OutputParameters(r))["shared_memory_offset"].set_bool_param(true); },
       kInvalid, {"outputs[0].parameters[shared_memory_offset]"}},
      {"RegionAsInt64",
       [](InferRequest* r) { (*InputParameters(r))["shared_memory_region"].set_int64_param(1); },
       kInvalid, {"inputs[0].parameters[shared_memory_region] must be a non-empty string_param"}},
      {"EmptyRegionName",
       [](InferRequest* r) { (*OutputParameters(r))["shared_memory_region"].set_string_param(""); },
       kInvalid, {"outputs[0].parameters[shared_memory_region]"}},
      {"ByteSizeWithoutRegion",
       [](InferRequest* r) { InputParameters(r)->erase("shared_memory_region"); }, kInvalid,
       {"inputs[0].parameters", "no shared_memory_region"}},
      {"RawInputContentsToo",
       [](InferRequest* r) { r->add_raw_input_contents(std::string(kFloat32InputBytes, '\0')); }, kInvalid,
       {"inputs[0]", "raw_input_contents and contents must then be empty"}},
      {"Fp32ContentsToo",
       [](InferRequest* r) { r->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f); },
       kInvalid, {"inputs[0]", "raw_input_contents and contents must then be empty"}},
  };
}

class SharedMemoryRequestErrorTest : public SharedMemoryTest,
                                     public ::testing::WithParamInterface<RequestErrorCase> {};

TEST_P(SharedMemoryRequestErrorTest, FailsWithCodeAndMessageAndWritesNothing) {
  Load(SmallGraph("model", v1::FLOAT32, v1::NCHW));
  const std::string input = RandomTensorBytes(v1::FLOAT32, ElementCount(InputShape()), 5);
  ASSERT_EQ(input.size(), static_cast<size_t>(kFloat32InputBytes));
  std::unique_ptr<PosixSharedMemory> in = NewObject("in", kInputRegionBytes);
  std::unique_ptr<PosixSharedMemory> out = NewObject("out", kFloat32OutputBytes);
  in->Write(0, input);
  out->Fill(0, out->size(), kUnwritten);
  RegisterWhole("in", *in);
  RegisterWhole("out", *out);
  inference::ModelInferRequest good = RequestWithoutContents("model", "FP32", InputShape());
  PlaceInRegion("in", kFloat32InputBytes, 0, InputParameters(&good));
  good.add_outputs()->set_name("output");
  PlaceInRegion("out", kFloat32OutputBytes, 0, OutputParameters(&good));

  inference::ModelInferRequest bad = good;
  GetParam().spoil(&bad);
  const absl::StatusOr<inference::ModelInferResponse> refused = Infer(bad);
  EXPECT_EQ(refused.status().code(), GetParam().code) << refused.status();
  for (const std::string& part : GetParam().message_has) {
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr(part));
  }
  EXPECT_TRUE(out->Read(0, out->size()) == Unwritten(out->size()))
      << "a refused request wrote into the output region";

  // The good request still works: the refusal changed nothing.
  const absl::StatusOr<inference::ModelInferResponse> answered = Infer(good);
  ASSERT_TRUE(answered.ok()) << answered.status();
  EXPECT_TRUE(out->Read(0, out->size()) == RawOutput("model", "FP32", InputShape(), input));
}

// ---- a region truncated after registration ------------------------------------

// What a client can do to its object under the server's mapping.
void TruncateObject(const std::string& key) {
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0) << key;
  ASSERT_EQ(ftruncate(fd, 0), 0) << key;
  close(fd);
}

// The server's accesses to the lost pages would raise SIGBUS and kill it
// (this test with it: the server runs in this process); instead the request
// reading or writing them fails, and the server goes on serving.
TEST_F(SharedMemoryTest, TruncatedRegionsFailTheirRequestNotTheServer) {
  Load(SmallGraph("model", v1::FLOAT32, v1::NCHW));
  const std::string input = RandomTensorBytes(v1::FLOAT32, ElementCount(InputShape()), 11);
  const std::string expected = RawOutput("model", "FP32", InputShape(), input);
  ASSERT_FALSE(expected.empty());
  const auto request = [](const std::string& in, const std::string& out) {
    inference::ModelInferRequest r = RequestWithoutContents("model", "FP32", InputShape());
    PlaceInRegion(in, kFloat32InputBytes, 0, InputParameters(&r));
    r.add_outputs()->set_name("output");
    PlaceInRegion(out, kFloat32OutputBytes, 0, OutputParameters(&r));
    return r;
  };
  std::unique_ptr<PosixSharedMemory> cut_in = NewObject("cut_in", 3 * 4096);
  std::unique_ptr<PosixSharedMemory> in = NewObject("in", kFloat32InputBytes);
  std::unique_ptr<PosixSharedMemory> cut_out = NewObject("cut_out", 3 * 4096);
  std::unique_ptr<PosixSharedMemory> out = NewObject("out", kFloat32OutputBytes);
  cut_in->Write(0, input);
  in->Write(0, input);
  RegisterWhole("cut_in", *cut_in);
  RegisterWhole("in", *in);
  RegisterWhole("cut_out", *cut_out);
  RegisterWhole("out", *out);
  ASSERT_TRUE(Infer(request("cut_in", "cut_out")).ok()) << "before the cut";

  TruncateObject(cut_in->key());
  TruncateObject(cut_out->key());
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"cut_in", "out"},
                                 std::pair<std::string, std::string>{"in", "cut_out"}}) {
    const absl::StatusOr<inference::ModelInferResponse> refused = Infer(request(from, to));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
        << from << " -> " << to << ": " << refused.status();
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr("truncated after it was registered"));
  }
  out->Fill(0, out->size(), kUnwritten);
  const absl::StatusOr<inference::ModelInferResponse> answered = Infer(request("in", "out"));
  ASSERT_TRUE(answered.ok()) << answered.status();
  EXPECT_TRUE(out->Read(0, out->size()) == expected);
  // Unregistering the cut regions unmaps them without touching their pages.
  EXPECT_TRUE(Unregister("cut_in").ok());
  EXPECT_TRUE(Unregister("cut_out").ok());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SharedMemoryRequestErrorTest, ::testing::ValuesIn(RequestErrorCases()),
    [](const ::testing::TestParamInfo<RequestErrorCase>& info) { return info.param.name; });

}  // namespace
}  // namespace convserve
