#include "engine/cudnn/cudnn_status.h"

#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

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
  return absl::Status(code, absl::StrCat(expression, " failed: ", cudaGetErrorName(error), " (",
                                         cudaGetErrorString(error), ") at ", file, ":", line));
}

}  // namespace convserve
