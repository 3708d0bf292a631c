// Setting up device memory before a test runs kernels on it. cudaMemset on
// device memory, and cudaMemcpy from pageable host memory to the device,
// may return before the device memory holds the bytes (the CUDA runtime
// API's "API synchronization behavior"), and they run on the default
// stream, which the non-blocking streams the kernels run on do not wait
// for: a NaN fill could land after the kernel's output. These wait for the
// default stream.
#ifndef CONVSERVE_TESTS_TEST_UTIL_DEVICE_SETUP_H_
#define CONVSERVE_TESTS_TEST_UTIL_DEVICE_SETUP_H_

#include <cuda_runtime_api.h>

#include <cstddef>

namespace convserve {

inline cudaError_t CopyToDevice(void* device, const void* host, size_t bytes) {
  const cudaError_t copied = cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice);
  return copied != cudaSuccess ? copied : cudaStreamSynchronize(nullptr);
}

inline cudaError_t FillDevice(void* device, int value, size_t bytes) {
  const cudaError_t filled = cudaMemset(device, value, bytes);
  return filled != cudaSuccess ? filled : cudaStreamSynchronize(nullptr);
}

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_DEVICE_SETUP_H_
