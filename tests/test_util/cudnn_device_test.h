// What the GPU tests that drive the cuDNN layer code directly share: a
// fixture holding device 0's cuDNN target, a stream and a handle on it
// (skipping the test where no CUDA device is visible), a run of one plan
// into a guarded output against the float64 reference, and seeds and counts
// read from the environment.
#ifndef CONVSERVE_TESTS_TEST_UTIL_CUDNN_DEVICE_TEST_H_
#define CONVSERVE_TESTS_TEST_UTIL_CUDNN_DEVICE_TEST_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/cudnn/conv_layer_plan.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/cudnn/device_weights.h"
#include "engine/tensor.h"
#include "gtest/gtest.h"
#include "tests/test_util/naive_conv.h"

namespace convserve {

class CudnnDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    absl::StatusOr<CudnnVersions> versions = CheckCudnnRuntime(0);
    ASSERT_TRUE(versions.ok()) << versions.status();
    target_ = versions->target();
    absl::StatusOr<CudaStream> stream = CudaStream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = *std::move(stream);
    absl::StatusOr<CudnnHandle> handle = CudnnHandle::Create(stream_.get());
    ASSERT_TRUE(handle.ok()) << handle.status();
    handle_ = *std::move(handle);
  }

  // Guard bytes after an output, and the byte the output and the guard are
  // filled with first: NaN in every dtype, so an element left unwritten
  // fails the comparison.
  static constexpr size_t kGuardBytes = 256;
  static constexpr uint8_t kFill = 0xFF;

  // Runs `plan` for `problem` (layer 0 of `weights`' graph) on input `x`
  // into a NaN-filled output of `output_bytes` with kGuardBytes after it;
  // expects no guard byte written and returns the relative L2 error against
  // `expected` (infinity when a step failed, which also fails the test).
  double RunGuarded(ConvLayerPlan& plan, const ConvLayerProblem& problem,
                    const DeviceWeights& weights, const DeviceBuffer& x, size_t output_bytes,
                    const std::vector<double>& expected) {
    absl::StatusOr<DeviceBuffer> y = DeviceBuffer::Create(output_bytes + kGuardBytes);
    absl::StatusOr<DeviceBuffer> workspace =
        DeviceBuffer::Create(std::max<int64_t>(plan.workspace_bytes(), 256));
    EXPECT_TRUE(y.ok() && workspace.ok());
    if (!y.ok() || !workspace.ok()) return INFINITY;
    EXPECT_EQ(cudaMemset(y->data(), kFill, y->bytes()), cudaSuccess);
    ConvLayerBuffers buffers;
    buffers.x = x.data();
    buffers.w = weights.weights(0);
    buffers.bias = weights.bias(0);
    buffers.y = y->data();
    buffers.workspace = workspace->data();
    absl::Status ran = plan.Bind(problem, buffers);
    if (ran.ok()) ran = plan.RunBound(handle_.get(), stream_.get(), problem);
    EXPECT_TRUE(ran.ok()) << ran;
    return ReadGuarded(*y, output_bytes, problem.dtype, expected, ran.ok());
  }

  // After a run on the stream into `y` (an output of `output_bytes`, then
  // kGuardBytes of guard, all filled with kFill first): waits for it,
  // expects no guard byte written and returns the relative L2 error of the
  // output against `expected` (infinity when the run failed, `ran` false).
  double ReadGuarded(const DeviceBuffer& y, size_t output_bytes, DType dtype,
                     const std::vector<double>& expected, bool ran) {
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    std::string actual(output_bytes + kGuardBytes, '\0');
    EXPECT_EQ(cudaMemcpy(actual.data(), y.data(), actual.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    size_t overwritten = 0;
    for (size_t i = output_bytes; i < actual.size(); ++i) {
      overwritten += static_cast<uint8_t>(actual[i]) != kFill;
    }
    EXPECT_EQ(overwritten, 0u) << "bytes written past the output";
    actual.resize(output_bytes);
    if (!ran) return INFINITY;
    return RelativeL2Error(DecodeToDouble(dtype, actual), expected);
  }

  CudnnTarget target_;
  CudaStream stream_;
  CudnnHandle handle_;
};

// The unsigned integer in environment variable `name`, or `fallback`.
inline uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 10) : fallback;
}

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_CUDNN_DEVICE_TEST_H_
