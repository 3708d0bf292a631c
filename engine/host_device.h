// CONVSERVE_HOST_DEVICE marks a function both the host compiler and nvcc's
// device pass compile (__host__ __device__ under nvcc, nothing under g++),
// for headers shared by the CPU code and CUDA kernels.
#ifndef CONVSERVE_ENGINE_HOST_DEVICE_H_
#define CONVSERVE_ENGINE_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define CONVSERVE_HOST_DEVICE __host__ __device__
#else
#define CONVSERVE_HOST_DEVICE
#endif

#endif  // CONVSERVE_ENGINE_HOST_DEVICE_H_
