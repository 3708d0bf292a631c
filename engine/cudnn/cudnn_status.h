// One macro each for CUDA runtime and cuDNN calls: a failing call becomes an
// absl::Status carrying the expression, the decoded error, cuDNN's last error
// message (the only hint the backend API gives after BAD_PARAM) and file:line.
#ifndef CONVSERVE_ENGINE_CUDNN_CUDNN_STATUS_H_
#define CONVSERVE_ENGINE_CUDNN_CUDNN_STATUS_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "absl/status/status.h"

namespace convserve {

absl::Status CudnnError(cudnnStatus_t status, const char* expression, const char* file,
                        int line);
absl::Status CudaError(cudaError_t error, const char* expression, const char* file, int line);

}  // namespace convserve

#define CUDNN_RETURN_IF_ERROR(expr)                                                 \
  do {                                                                              \
    const cudnnStatus_t convserve_cudnn_status_ = (expr);                           \
    if (convserve_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                          \
      return ::convserve::CudnnError(convserve_cudnn_status_, #expr, __FILE__, __LINE__); \
    }                                                                               \
  } while (false)

#define CUDA_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                              \
    const cudaError_t convserve_cuda_error_ = (expr);                               \
    if (convserve_cuda_error_ != cudaSuccess) {                                     \
      return ::convserve::CudaError(convserve_cuda_error_, #expr, __FILE__, __LINE__); \
    }                                                                               \
  } while (false)

#endif  // CONVSERVE_ENGINE_CUDNN_CUDNN_STATUS_H_
