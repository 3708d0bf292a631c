#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/probe_buffers.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

constexpr uint8_t kGuardByte = 0xA5;
constexpr uint32_t kGuardWord = 0xA5A5A5A5u;
constexpr size_t kMinGuard = 64 << 10;
constexpr size_t kMaxGuard = 64 << 20;
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

// Result slots in results_.
enum Slot { kMismatches, kFirst, kLast, kUnwritten, kNonFinite, kSlots };

__device__ inline float Uniform(uint64_t seed, uint64_t i) {
  // splitmix64 of (seed, i): independent per element, no state.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__device__ inline void Store(float* p, float v) { *p = v; }
__device__ inline void Store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ inline void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

__device__ inline bool IsPoison(float v) { return __float_as_uint(v) == 0xFFFFFFFFu; }
__device__ inline bool IsPoison(__half v) { return __half_as_ushort(v) == 0xFFFFu; }
__device__ inline bool IsPoison(__nv_bfloat16 v) { return __bfloat16_as_ushort(v) == 0xFFFFu; }
__device__ inline float Load(float v) { return v; }
__device__ inline float Load(__half v) { return __half2float(v); }
__device__ inline float Load(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void FillUniformKernel(T* data, int64_t count, uint64_t seed, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Store(data + i, Uniform(seed, i) * scale);
  }
}

__global__ void GuardScanKernel(const uint32_t* words, int64_t count, int64_t base,
                                unsigned long long* results) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (words[i] != kGuardWord) {
      atomicAdd(&results[kMismatches], 1ull);
      atomicMin(&results[kFirst], static_cast<unsigned long long>(base + i * 4));
      atomicMax(&results[kLast], static_cast<unsigned long long>(base + i * 4));
    }
  }
}

template <typename T>
__global__ void OutputScanKernel(const T* data, int64_t count, unsigned long long* results) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (IsPoison(data[i])) {
      atomicAdd(&results[kUnwritten], 1ull);
    } else if (!isfinite(Load(data[i]))) {
      atomicAdd(&results[kNonFinite], 1ull);
    }
  }
}

__global__ void MisalignedWriteKernel(char* memory) {
  *reinterpret_cast<float4*>(memory + 4) = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
}

int Blocks(int64_t count) {
  return static_cast<int>(std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

template <typename T>
void LaunchFill(void* data, int64_t count, uint64_t seed, float scale, cudaStream_t stream) {
  FillUniformKernel<T><<<Blocks(count), kThreads, 0, stream>>>(static_cast<T*>(data), count, seed,
                                                               scale);
}

template <typename T>
void LaunchOutputScan(const void* data, int64_t count, unsigned long long* results,
                      cudaStream_t stream) {
  OutputScanKernel<T><<<Blocks(count), kThreads, 0, stream>>>(static_cast<const T*>(data), count,
                                                              results);
}

absl::Status Fill(DType dtype, void* data, int64_t count, uint64_t seed, float scale,
                  cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat32:
      LaunchFill<float>(data, count, seed, scale, stream);
      break;
    case DType::kFloat16:
      LaunchFill<__half>(data, count, seed, scale, stream);
      break;
    case DType::kBFloat16:
      LaunchFill<__nv_bfloat16>(data, count, seed, scale, stream);
      break;
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProbeBuffers::Guarded> ProbeBuffers::Allocate(size_t bytes) {
  Guarded buffer;
  buffer.bytes = bytes;
  buffer.capacity = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  buffer.guard = std::clamp(buffer.capacity, kMinGuard, kMaxGuard) / 256 * 256;
  ASSIGN_OR_RETURN(buffer.block, DeviceBuffer::Create(buffer.capacity + 2 * buffer.guard));
  CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(buffer.block.data(), kGuardByte, buffer.block.bytes(), stream_));
  return buffer;
}

absl::StatusOr<ProbeBuffers> ProbeBuffers::Create(const ConvLayerProblem& problem,
                                                  cudaStream_t stream, uint64_t seed) {
  ProbeBuffers probe(problem, stream);
  const size_t element = DTypeSize(problem.dtype);
  ASSIGN_OR_RETURN(probe.x_, probe.Allocate(NumElements(problem.input) * element));
  ASSIGN_OR_RETURN(probe.w_, probe.Allocate(NumElements(problem.weights) * element));
  ASSIGN_OR_RETURN(probe.bias_, probe.Allocate(problem.output[1] * element));
  ASSIGN_OR_RETURN(probe.y_, probe.Allocate(NumElements(problem.output) * element));
  ASSIGN_OR_RETURN(probe.workspace_, probe.Allocate(0));
  ASSIGN_OR_RETURN(probe.results_, DeviceBuffer::Create(kSlots * sizeof(unsigned long long)));
  int64_t fan_in = 1;
  for (size_t d = 1; d < problem.weights.size(); ++d) fan_in *= problem.weights[d];
  RETURN_IF_ERROR(Fill(problem.dtype, probe.x_.data(), NumElements(problem.input), seed, 1.0f,
                       stream));
  RETURN_IF_ERROR(Fill(problem.dtype, probe.w_.data(), NumElements(problem.weights), seed + 1,
                       1.0f / std::sqrt(static_cast<float>(fan_in)), stream));
  RETURN_IF_ERROR(Fill(problem.dtype, probe.bias_.data(), problem.output[1], seed + 2, 1.0f,
                       stream));
  return probe;
}

absl::Status ProbeBuffers::ReserveWorkspace(int64_t bytes) {
  if (static_cast<int64_t>(workspace_.capacity) < bytes) {
    ASSIGN_OR_RETURN(workspace_, Allocate(bytes));
    return absl::OkStatus();
  }
  // Reuse the allocation; what this candidate may not use becomes guard.
  workspace_.bytes = bytes;
  const size_t used = (workspace_.bytes + 3) / 4 * 4;
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(static_cast<char*>(workspace_.data()) + used, kGuardByte,
                                       workspace_.capacity - used, stream_));
  return absl::OkStatus();
}

ConvLayerBuffers ProbeBuffers::buffers() const {
  ConvLayerBuffers b;
  b.x = x_.data();
  b.w = w_.data();
  b.bias = problem_.has_bias ? bias_.data() : nullptr;
  b.y = y_.data();
  b.workspace = workspace_.data();
  return b;
}

absl::Status ProbeBuffers::PoisonOutput() {
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      y_.data(), 0xFF, NumElements(problem_.output) * DTypeSize(problem_.dtype), stream_));
  return absl::OkStatus();
}

absl::Status ProbeBuffers::CheckGuards(const Guarded& buffer, const char* name, bool* ok,
                                       std::string* report) {
  unsigned long long* results = static_cast<unsigned long long*>(results_.data());
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(results, 0, kSlots * sizeof(unsigned long long), stream_));
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(results + kFirst, 0xFF, sizeof(unsigned long long), stream_));
  const char* block = static_cast<const char*>(buffer.block.data());
  // The zone before the data, then everything after the bytes in use (the
  // unused capacity too). Offsets are from the block's start.
  const int64_t before_words = static_cast<int64_t>(buffer.guard / 4);
  const int64_t used = static_cast<int64_t>((buffer.bytes + 3) / 4 * 4);
  const int64_t after_words =
      (static_cast<int64_t>(buffer.capacity + buffer.guard) - used) / 4;
  GuardScanKernel<<<Blocks(before_words), kThreads, 0, stream_>>>(
      reinterpret_cast<const uint32_t*>(block), before_words, 0, results);
  GuardScanKernel<<<Blocks(after_words), kThreads, 0, stream_>>>(
      reinterpret_cast<const uint32_t*>(block + buffer.guard + used), after_words,
      static_cast<int64_t>(buffer.guard) + used, results);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  unsigned long long host[kSlots];
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, results, sizeof(host), cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (host[kMismatches] > 0) {
    *ok = false;
    const long long guard = static_cast<long long>(buffer.guard);
    absl::StrAppend(report, report->empty() ? "" : "; ", "changed ", host[kMismatches],
                    " guard words around ", name, " (", buffer.bytes,
                    " bytes), at byte offsets ", static_cast<long long>(host[kFirst]) - guard,
                    " to ", static_cast<long long>(host[kLast]) - guard + 3,
                    " from its start");
  }
  return absl::OkStatus();
}

absl::Status ProbeBuffers::Check(bool check_output) {
  bool ok = true;
  std::string report;
  RETURN_IF_ERROR(CheckGuards(x_, "x", &ok, &report));
  RETURN_IF_ERROR(CheckGuards(w_, "w", &ok, &report));
  RETURN_IF_ERROR(CheckGuards(bias_, "bias", &ok, &report));
  RETURN_IF_ERROR(CheckGuards(y_, "y", &ok, &report));
  RETURN_IF_ERROR(CheckGuards(workspace_, "workspace", &ok, &report));
  if (check_output) {
    unsigned long long* results = static_cast<unsigned long long*>(results_.data());
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(results, 0, kSlots * sizeof(unsigned long long), stream_));
    const int64_t count = NumElements(problem_.output);
    switch (problem_.dtype) {
      case DType::kFloat32:
        LaunchOutputScan<float>(y_.data(), count, results, stream_);
        break;
      case DType::kFloat16:
        LaunchOutputScan<__half>(y_.data(), count, results, stream_);
        break;
      case DType::kBFloat16:
        LaunchOutputScan<__nv_bfloat16>(y_.data(), count, results, stream_);
        break;
    }
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    unsigned long long host[kSlots];
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host, results, sizeof(host), cudaMemcpyDeviceToHost, stream_));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    if (host[kUnwritten] > 0) {
      ok = false;
      absl::StrAppend(&report, report.empty() ? "" : "; ", "left ", host[kUnwritten], " of ",
                      count, " outputs unwritten");
    }
    if (host[kNonFinite] > 0) {
      ok = false;
      absl::StrAppend(&report, report.empty() ? "" : "; ", "wrote ", host[kNonFinite],
                      " non-finite outputs from finite inputs");
    }
  }
  if (!ok) return absl::FailedPreconditionError(report);
  return absl::OkStatus();
}

absl::Status LaunchMisalignedWriteForTesting(void* device_memory, cudaStream_t stream) {
  MisalignedWriteKernel<<<1, 1, 0, stream>>>(static_cast<char*>(device_memory));
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace convserve
