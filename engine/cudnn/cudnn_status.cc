#include "engine/cudnn/cudnn_status.h"

#include <optional>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

// Status payload naming the CUDA error a status came from.
constexpr char kCudaErrorPayload[] = "type.convserve/cuda_error";

absl::StatusCode CodeFor(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_NOT_SUPPORTED:
    case CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH:
    case CUDNN_STATUS_NOT_SUPPORTED_SHAPE:
    case CUDNN_STATUS_NOT_SUPPORTED_LAYOUT:
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE:
      return absl::StatusCode::kUnimplemented;
    case CUDNN_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudnnError(cudnnStatus_t status, const char* expression, const char* file,
                        int line) {
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  return absl::Status(CodeFor(status),
                      absl::StrCat(expression, " failed: ", cudnnGetErrorString(status),
                                   last[0] != '\0' ? absl::StrCat(" (", last, ")") : "", " at ",
                                   file, ":", line));
}

absl::Status CudaError(cudaError_t error, const char* expression, const char* file, int line) {
  const absl::StatusCode code = error == cudaErrorMemoryAllocation
                                    ? absl::StatusCode::kResourceExhausted
                                    : absl::StatusCode::kInternal;
  absl::Status status(code, absl::StrCat(expression, " failed: ", cudaGetErrorName(error), " (",
                                         cudaGetErrorString(error), ") at ", file, ":", line));
  status.SetPayload(kCudaErrorPayload, absl::Cord(absl::StrCat(static_cast<int>(error))));
  return status;
}

bool IsStickyCudaError(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorExternalDevice:
    case cudaErrorTensorMemoryLeak:
      return true;
    default:
      return false;
  }
}

bool IsHardwareCudaError(cudaError_t error) {
  return error == cudaErrorECCUncorrectable || error == cudaErrorNvlinkUncorrectable ||
         error == cudaErrorContained || error == cudaErrorExternalDevice;
}

cudaError_t CudaErrorOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kCudaErrorPayload);
  int code = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &code)) return cudaSuccess;
  return static_cast<cudaError_t>(code);
}

cudaError_t StickyCudaError(const absl::Status& status, cudaStream_t stream) {
  if (status.ok()) return cudaSuccess;
  const cudaError_t carried = CudaErrorOf(status);
  if (IsStickyCudaError(carried)) return carried;
  const cudaError_t now = cudaStreamSynchronize(stream);
  return IsStickyCudaError(now) ? now : cudaSuccess;
}

}  // namespace convserve
