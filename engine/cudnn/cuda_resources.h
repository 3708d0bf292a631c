// RAII owners for CUDA and cuDNN handles: device buffers, streams, events and
// cuDNN handles. Each is made by Create (setup can fail), moves but never
// copies, and releases its handle in the destructor. Not thread-safe.
#ifndef CONVSERVE_ENGINE_CUDNN_CUDA_RESOURCES_H_
#define CONVSERVE_ENGINE_CUDNN_CUDA_RESOURCES_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"

namespace convserve {

// cudaMalloc'd memory on the current device (256-byte aligned).
class DeviceBuffer {
 public:
  static absl::StatusOr<DeviceBuffer> Create(size_t bytes);

  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  DeviceBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}

  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost): what async copies need to
// overlap with compute and to run at full PCIe/NVLink speed.
class PinnedBuffer {
 public:
  static absl::StatusOr<PinnedBuffer> Create(size_t bytes);

  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  PinnedBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}

  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking stream: it never synchronizes with the legacy default stream.
class CudaStream {
 public:
  static absl::StatusOr<CudaStream> Create();

  CudaStream() = default;
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  CudaStream(CudaStream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  CudaStream& operator=(CudaStream&& other) noexcept;

  cudaStream_t get() const { return stream_; }

 private:
  explicit CudaStream(cudaStream_t stream) : stream_(stream) {}

  cudaStream_t stream_ = nullptr;
};

class CudaEvent {
 public:
  static absl::StatusOr<CudaEvent> Create();

  CudaEvent() = default;
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& other) noexcept;

  cudaEvent_t get() const { return event_; }

 private:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}

  cudaEvent_t event_ = nullptr;
};

class CudnnHandle {
 public:
  // A handle on the current device bound to `stream`.
  static absl::StatusOr<CudnnHandle> Create(cudaStream_t stream);

  CudnnHandle() = default;
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  CudnnHandle(CudnnHandle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  CudnnHandle& operator=(CudnnHandle&& other) noexcept;

  cudnnHandle_t get() const { return handle_; }

 private:
  explicit CudnnHandle(cudnnHandle_t handle) : handle_(handle) {}

  cudnnHandle_t handle_ = nullptr;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_CUDA_RESOURCES_H_
