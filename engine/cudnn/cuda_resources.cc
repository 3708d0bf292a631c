#include "engine/cudnn/cuda_resources.h"

#include "engine/cudnn/cudnn_status.h"

namespace convserve {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(size_t bytes) {
  void* data = nullptr;
  if (bytes > 0) CUDA_RETURN_IF_ERROR(cudaMalloc(&data, bytes));
  return DeviceBuffer(data, bytes);
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Create(size_t bytes) {
  void* data = nullptr;
  if (bytes > 0) CUDA_RETURN_IF_ERROR(cudaMallocHost(&data, bytes));
  return PinnedBuffer(data, bytes);
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

absl::StatusOr<CudaStream> CudaStream::Create() {
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return CudaStream(stream);
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

absl::StatusOr<CudaEvent> CudaEvent::Create() {
  cudaEvent_t event = nullptr;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
  return CudaEvent(event);
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

absl::StatusOr<CudnnHandle> CudnnHandle::Create(cudaStream_t stream) {
  cudnnHandle_t handle = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnCreate(&handle));
  CudnnHandle owned(handle);
  CUDNN_RETURN_IF_ERROR(cudnnSetStream(handle, stream));
  return owned;
}

CudnnHandle::~CudnnHandle() {
  if (handle_ != nullptr) cudnnDestroy(handle_);
}

CudnnHandle& CudnnHandle::operator=(CudnnHandle&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cudnnDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

}  // namespace convserve
