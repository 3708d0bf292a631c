// What the request fuzzers run against: the server's request path without
// gRPC. An InferenceCore over an ImmediateRunner (no compute) with three
// small graphs loaded, one per dtype and layout family, the KServe and
// convserve.v1 services over it, and two registered system shared-memory
// regions. Made once per process, on first use; never destroyed (libFuzzer
// exits without unwinding).
#ifndef CONVSERVE_TESTS_FUZZ_FUZZ_SERVER_H_
#define CONVSERVE_TESTS_FUZZ_FUZZ_SERVER_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/convserve_service.h"
#include "server/inference_core.h"
#include "server/kserve_service.h"
#include "server/shared_memory_registry.h"
#include "tests/test_util/immediate_runner.h"
#include "tests/test_util/posix_shared_memory.h"

namespace convserve {

// Graph names a fuzzed request can reach (seeds use them).
inline constexpr char kFuzzGraphNchw[] = "conv_nchw_fp32";
inline constexpr char kFuzzGraphNhwc[] = "conv_nhwc_fp16";
inline constexpr char kFuzzGraph3d[] = "conv3d_bf16";
// Registered regions: "region" (64 KiB from offset 0) and "region_tail"
// (8 KiB from offset 4096 of the same object).
inline constexpr char kFuzzRegion[] = "region";
inline constexpr char kFuzzRegionTail[] = "region_tail";

class FuzzServer {
 public:
  // Aborts with a message when the setup fails (a fuzzer without its server
  // would report nothing).
  static FuzzServer& Get();

  InferenceCore& core() { return *core_; }
  KServeService& kserve() { return *kserve_; }
  ConvServeService& convserve() { return *convserve_; }
  RequestRunner& runner() { return *core_->mutable_runner(); }

 private:
  FuzzServer() = default;

  std::unique_ptr<InferenceCore> core_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<SharedMemoryRegistry> shared_memory_;
  std::unique_ptr<GraphManagementPolicy> management_;
  std::unique_ptr<KServeService> kserve_;
  std::unique_ptr<ConvServeService> convserve_;
  std::unique_ptr<PosixSharedMemory> region_object_;
};

// Drops protobuf's log lines (it logs every string field with invalid UTF-8
// it refuses): a fuzzer writing them runs at a fraction of its speed.
void QuietProtobufLogs();

// `data` as gRPC received it: in up to three slices (cut at a third and two
// thirds), so parsers meet fields split across slice boundaries.
grpc::ByteBuffer ReceivedBytes(const uint8_t* data, size_t size);

// The message's bytes in deterministic serialization (map entries sorted):
// equal for equal messages, NaN values included (which a field-by-field
// comparison calls unequal).
std::string CanonicalBytes(const google::protobuf::MessageLite& message);

// Aborts (a fuzzer finding) when a request the client got wrong was answered
// with a code that blames the server: INTERNAL, UNKNOWN, DATA_LOSS,
// UNIMPLEMENTED, or OK where an error was due.
void CheckClientError(const absl::Status& status);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_FUZZ_FUZZ_SERVER_H_
