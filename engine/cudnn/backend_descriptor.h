// RAII owner of one cuDNN backend descriptor, with typed attribute setters.
// Not thread-safe; a finalized descriptor may be read from several threads.
#ifndef CONVSERVE_ENGINE_CUDNN_BACKEND_DESCRIPTOR_H_
#define CONVSERVE_ENGINE_CUDNN_BACKEND_DESCRIPTOR_H_

#include <cudnn.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace convserve {

class BackendDescriptor {
 public:
  static absl::StatusOr<BackendDescriptor> Create(cudnnBackendDescriptorType_t type);

  BackendDescriptor() = default;
  ~BackendDescriptor();
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;
  BackendDescriptor(BackendDescriptor&& other) noexcept;
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;

  cudnnBackendDescriptor_t get() const { return descriptor_; }

  // One value or an array of `type` (see cudnnBackendAttributeType_t).
  absl::Status Set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                   int64_t count, const void* values);
  absl::Status SetInt64(cudnnBackendAttributeName_t name, int64_t value);
  absl::Status SetInt64s(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values);
  absl::Status SetDouble(cudnnBackendAttributeName_t name, double value);
  absl::Status SetFloat(cudnnBackendAttributeName_t name, float value);
  absl::Status SetDataType(cudnnBackendAttributeName_t name, cudnnDataType_t value);
  absl::Status SetDescriptor(cudnnBackendAttributeName_t name, const BackendDescriptor& value);
  absl::Status SetDescriptors(cudnnBackendAttributeName_t name,
                              const std::vector<cudnnBackendDescriptor_t>& values);
  absl::Status Finalize();

 private:
  explicit BackendDescriptor(cudnnBackendDescriptor_t descriptor) : descriptor_(descriptor) {}

  cudnnBackendDescriptor_t descriptor_ = nullptr;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_BACKEND_DESCRIPTOR_H_
