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

// Errors after which the process's CUDA context on that device is unusable
// ("sticky"): illegal or misaligned address, illegal instruction, launch
// failure, hardware stack error, device-side assert, uncorrectable ECC or
// NVLink error, contained or external-device errors. Every later call fails
// too, until the process exits.
bool IsStickyCudaError(cudaError_t error);
// Sticky errors the hardware reports (uncorrectable ECC or NVLink errors,
// contained or external-device errors): no kernel is to blame for them.
bool IsHardwareCudaError(cudaError_t error);
// The CUDA error a status from CudaError carries, or cudaSuccess.
cudaError_t CudaErrorOf(const absl::Status& status);
// The sticky error behind `status`, or cudaSuccess: from the status itself,
// or, for a failure reported another way (cuDNN wraps CUDA failures in its
// own codes), from a synchronization of `stream`.
cudaError_t StickyCudaError(const absl::Status& status, cudaStream_t stream);

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
