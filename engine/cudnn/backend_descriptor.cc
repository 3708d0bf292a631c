#include "engine/cudnn/backend_descriptor.h"

#include <utility>

#include "engine/cudnn/cudnn_status.h"

namespace convserve {

absl::StatusOr<BackendDescriptor> BackendDescriptor::Create(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t descriptor = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnBackendCreateDescriptor(type, &descriptor));
  return BackendDescriptor(descriptor);
}

BackendDescriptor::~BackendDescriptor() {
  if (descriptor_ != nullptr) cudnnBackendDestroyDescriptor(descriptor_);
}

BackendDescriptor::BackendDescriptor(BackendDescriptor&& other) noexcept
    : descriptor_(std::exchange(other.descriptor_, nullptr)) {}

BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  if (this != &other) {
    if (descriptor_ != nullptr) cudnnBackendDestroyDescriptor(descriptor_);
    descriptor_ = std::exchange(other.descriptor_, nullptr);
  }
  return *this;
}

absl::Status BackendDescriptor::Set(cudnnBackendAttributeName_t name,
                                    cudnnBackendAttributeType_t type, int64_t count,
                                    const void* values) {
  CUDNN_RETURN_IF_ERROR(cudnnBackendSetAttribute(descriptor_, name, type, count, values));
  return absl::OkStatus();
}

absl::Status BackendDescriptor::SetInt64(cudnnBackendAttributeName_t name, int64_t value) {
  return Set(name, CUDNN_TYPE_INT64, 1, &value);
}

absl::Status BackendDescriptor::SetInt64s(cudnnBackendAttributeName_t name,
                                          const std::vector<int64_t>& values) {
  return Set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

absl::Status BackendDescriptor::SetDouble(cudnnBackendAttributeName_t name, double value) {
  return Set(name, CUDNN_TYPE_DOUBLE, 1, &value);
}

absl::Status BackendDescriptor::SetFloat(cudnnBackendAttributeName_t name, float value) {
  return Set(name, CUDNN_TYPE_FLOAT, 1, &value);
}

absl::Status BackendDescriptor::SetDataType(cudnnBackendAttributeName_t name,
                                            cudnnDataType_t value) {
  return Set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

absl::Status BackendDescriptor::SetDescriptor(cudnnBackendAttributeName_t name,
                                              const BackendDescriptor& value) {
  cudnnBackendDescriptor_t raw = value.get();
  return Set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

absl::Status BackendDescriptor::SetDescriptors(
    cudnnBackendAttributeName_t name, const std::vector<cudnnBackendDescriptor_t>& values) {
  return Set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(values.size()),
             values.data());
}

absl::Status BackendDescriptor::Finalize() {
  CUDNN_RETURN_IF_ERROR(cudnnBackendFinalize(descriptor_));
  return absl::OkStatus();
}

}  // namespace convserve
