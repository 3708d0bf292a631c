// What the GPU tests that drive the cuDNN layer code directly share: a
// fixture holding device 0's cuDNN target, a stream and a handle on it
// (skipping the test where no CUDA device is visible), and seeds and counts
// read from the environment.
#ifndef CONVSERVE_TESTS_TEST_UTIL_CUDNN_DEVICE_TEST_H_
#define CONVSERVE_TESTS_TEST_UTIL_CUDNN_DEVICE_TEST_H_

#include <cstdint>
#include <cstdlib>

#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_backend.h"
#include "gtest/gtest.h"

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
