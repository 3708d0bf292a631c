// CUDA shared memory: device memory allocated here and exported by its IPC
// handle; the server opens the handle and reads and writes the memory in
// place on its GPU. Only in builds with the CUDA toolkit.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/shared_memory_block.h"

#if CONVSERVE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace convserve {

#if CONVSERVE_WITH_CUDA
namespace {

// A failed CUDA call as a status. (The engine's CUDA_RETURN_IF_ERROR lives in
// convserve_cudnn; linking that would make the load tool need cuDNN.)
absl::Status CudaStatus(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // clears a non-sticky error for this thread
  return absl::Status(
      error == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted
                                         : absl::StatusCode::kInternal,
      absl::StrCat(what, " failed: ", cudaGetErrorName(error), " (", cudaGetErrorString(error),
                   ")"));
}

class CudaSharedMemory final : public SharedMemoryBlock {
 public:
  CudaSharedMemory(int device, char* data, uint64_t byte_size, std::string handle)
      : device_(device), data_(data), byte_size_(byte_size), handle_(std::move(handle)) {}
  ~CudaSharedMemory() override {
    cudaSetDevice(device_);
    cudaFree(data_);
  }

  uint64_t byte_size() const override { return byte_size_; }

  // Each call selects the device: the calling thread (a gRPC thread, say)
  // may have another one current.
  absl::Status Write(uint64_t offset, absl::string_view bytes) override {
    if (offset > byte_size_ || bytes.size() > byte_size_ - offset) return OutOfRange();
    absl::Status status = CudaStatus(cudaSetDevice(device_), "cudaSetDevice");
    if (!status.ok()) return status;
    status = CudaStatus(
        cudaMemcpy(data_ + offset, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
        "cudaMemcpy (host to device)");
    if (!status.ok()) return status;
    // From pageable memory cudaMemcpy may return before the bytes are in
    // device memory; the server reads them on a stream that does not wait
    // for this one.
    return CudaStatus(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  }

  absl::Status Read(uint64_t offset, uint64_t size, std::string* out) const override {
    if (offset > byte_size_ || size > byte_size_ - offset) return OutOfRange();
    absl::Status status = CudaStatus(cudaSetDevice(device_), "cudaSetDevice");
    if (!status.ok()) return status;
    out->resize(size);
    return CudaStatus(cudaMemcpy(out->data(), data_ + offset, size, cudaMemcpyDeviceToHost),
                      "cudaMemcpy (device to host)");
  }

  absl::Status Register(ConvServeClient& server, const std::string& name) const override {
    return server.CudaSharedMemoryRegister(name, handle_, device_, byte_size_);
  }
  absl::Status Unregister(ConvServeClient& server, const std::string& name) const override {
    return server.CudaSharedMemoryUnregister(name);
  }

  // Device memory has no name; the process's exit frees it.
  void Unlink() override {}

 private:
  absl::Status OutOfRange() const {
    return absl::OutOfRangeError(
        absl::StrCat("past the end of the CUDA block (", byte_size_, " bytes)"));
  }

  const int device_;
  char* const data_;
  const uint64_t byte_size_;
  // The cudaIpcMemHandle_t's bytes, as CudaSharedMemoryRegister sends them.
  const std::string handle_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemoryBlock>> CreateCudaSharedMemory(int device,
                                                                          uint64_t byte_size) {
  int count = 0;
  const cudaError_t counted = cudaGetDeviceCount(&count);
  if (counted != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "--shared_memory=cuda: no CUDA GPU is usable on this machine (cudaGetDeviceCount: ",
        counted == cudaSuccess ? "0 devices" : cudaGetErrorString(counted), ")"));
  }
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--cuda_device=", device, ": this machine has ", count, " GPU(s), 0 to ", count - 1));
  }
  absl::Status status = CudaStatus(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")"));
  if (!status.ok()) return status;
  void* data = nullptr;
  status = CudaStatus(cudaMalloc(&data, byte_size), absl::StrCat("cudaMalloc(", byte_size, ")"));
  if (!status.ok()) return status;
  cudaIpcMemHandle_t handle;
  status = CudaStatus(cudaIpcGetMemHandle(&handle, data), "cudaIpcGetMemHandle");
  if (!status.ok()) {
    cudaFree(data);
    return status;
  }
  return std::unique_ptr<SharedMemoryBlock>(
      new CudaSharedMemory(device, static_cast<char*>(data), byte_size,
                           std::string(reinterpret_cast<const char*>(&handle), sizeof(handle))));
}

#else  // !CONVSERVE_WITH_CUDA

absl::StatusOr<std::unique_ptr<SharedMemoryBlock>> CreateCudaSharedMemory(int, uint64_t) {
  return absl::FailedPreconditionError(
      "--shared_memory=cuda needs a CUDA build (this convserve-load was built without the CUDA "
      "toolkit); use --shared_memory=system");
}

#endif  // CONVSERVE_WITH_CUDA

}  // namespace convserve
