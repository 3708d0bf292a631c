// What the shared-memory integration tests share (shared_memory_test.cc,
// shared_memory_errors_test.cc): a small graph, Triton's request parameters
// for a tensor in a region, POSIX shared memory objects, and a fixture with a
// real CPU server and the KServe shared-memory calls, each with a deadline.
#ifndef CONVSERVE_TESTS_INTEGRATION_SHARED_MEMORY_TEST_SUPPORT_H_
#define CONVSERVE_TESTS_INTEGRATION_SHARED_MEMORY_TEST_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/convserve_client.h"
#include "engine/backend.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "tests/test_util/posix_shared_memory.h"
#include "tests/test_util/test_server.h"

namespace convserve {

using KServeParameters = google::protobuf::Map<std::string, inference::InferParameter>;

// Deadline of every call, and the bound of every wait: all of it takes well
// under a second when the server is right.
inline constexpr absl::Duration kPatience = absl::Seconds(30);

inline constexpr int kInputChannels = 3;
inline constexpr int kOutputChannels = 5;
// Logical N, C, H, W of every input: 2 x 3 x 5 x 7; the output is
// 2 x 5 x 2 x 3.
std::vector<int64_t> InputShape();
std::vector<int64_t> OutputShape();
// Their bytes in float32.
inline constexpr int64_t kFloat32InputBytes = 2 * kInputChannels * 5 * 7 * 4;
inline constexpr int64_t kFloat32OutputBytes = 2 * kOutputChannels * 2 * 3 * 4;
// Written over output ranges first, so an output never written shows.
inline constexpr uint8_t kUnwritten = 0xA5;
std::string Unwritten(size_t bytes);

// C=3 -> 3x3 pad 1 (K=4, relu) -> 3x3 stride 2 (K=5, tanh), seeded weights.
v1::GraphDef SmallGraph(const std::string& name, v1::DataType data_type, v1::Layout layout);

int64_t ElementCount(const std::vector<int64_t>& shape);
// N, C, H, W -> N, H, W, C for NHWC: KServe shapes are in byte order.
std::vector<int64_t> ByteOrder(const std::vector<int64_t>& logical, v1::Layout layout);

// A request for `model` without the input's contents.
inference::ModelInferRequest RequestWithoutContents(const std::string& model,
                                                    const std::string& datatype,
                                                    const std::vector<int64_t>& byte_order_shape);
// Triton's parameters for a tensor in a region; offset 0 is left out, as
// tritonclient leaves it out.
void PlaceInRegion(const std::string& region, int64_t byte_size, int64_t offset,
                   KServeParameters* parameters);
KServeParameters* InputParameters(inference::ModelInferRequest* request);
// Of the first requested output.
KServeParameters* OutputParameters(inference::ModelInferRequest* request);

// A new object of `bytes` bytes. Shared memory is the premise of every test
// here: when /dev/shm cannot hold one, nothing else can run, so this aborts.
std::unique_ptr<PosixSharedMemory> NewObject(const std::string& tag, size_t bytes);

// The output of a response answered into a region: its metadata and the
// region's parameters, and no bytes in the message.
void ExpectOutputInRegion(const inference::ModelInferResponse& response,
                          const std::string& datatype, const std::vector<int64_t>& shape,
                          const std::string& region, int64_t byte_size, int64_t offset);

class SharedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override;

  // (Re)starts the server; `backend` null: the CPU backend.
  void StartServer(std::unique_ptr<Backend> backend, const TestServerOptions& options);
  void Load(const v1::GraphDef& graph);

  absl::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size);
  // Registers the whole object under `name` (a fatal failure when refused).
  void RegisterWhole(const std::string& name, const PosixSharedMemory& object);
  absl::Status Unregister(const std::string& name);
  absl::StatusOr<inference::SystemSharedMemoryStatusResponse> Status(const std::string& name);
  // The names Status("") lists.
  std::vector<std::string> RegionNames();

  absl::StatusOr<inference::ModelInferResponse> Infer(const inference::ModelInferRequest& request);
  // The model's output for `input` sent in raw_input_contents ("" on error).
  std::string RawOutput(const std::string& model, const std::string& datatype,
                        const std::vector<int64_t>& byte_order_shape, const std::string& input);

  // A deadline for a call on `kserve_`.
  static void Prepare(grpc::ClientContext* context);

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<ConvServeClient> client_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve_;
};

}  // namespace convserve

#endif  // CONVSERVE_TESTS_INTEGRATION_SHARED_MEMORY_TEST_SUPPORT_H_
