#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/probe_buffers.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

constexpr uint8_t kGuardByte = 0xA5;
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

__device__ inline float Convert(float v, float) { return v; }
__device__ inline __half Convert(float v, __half) { return __float2half_rn(v); }
__device__ inline __nv_bfloat16 Convert(float v, __nv_bfloat16) { return __float2bfloat16_rn(v); }
__device__ inline bool SameBits(float a, float b) { return __float_as_uint(a) == __float_as_uint(b); }
__device__ inline bool SameBits(__half a, __half b) { return __half_as_ushort(a) == __half_as_ushort(b); }
__device__ inline bool SameBits(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __bfloat16_as_ushort(a) == __bfloat16_as_ushort(b);
}

__device__ inline bool IsPoison(float v) { return __float_as_uint(v) == 0xFFFFFFFFu; }
__device__ inline bool IsPoison(__half v) { return __half_as_ushort(v) == 0xFFFFu; }
__device__ inline bool IsPoison(__nv_bfloat16 v) { return __bfloat16_as_ushort(v) == 0xFFFFu; }
__device__ inline float Load(float v) { return v; }
__device__ inline float Load(__half v) { return __half2float(v); }
__device__ inline float Load(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ inline void Record(unsigned long long offset, unsigned long long* results) {
  atomicAdd(&results[kMismatches], 1ull);
  atomicMin(&results[kFirst], offset);
  atomicMax(&results[kLast], offset);
}

// `verify`: count elements that differ from the fill instead of writing it.
template <typename T>
__global__ void UniformKernel(T* data, int64_t count, uint64_t seed, float scale, bool verify,
                              unsigned long long* results) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T expected = Convert(Uniform(seed, i) * scale, T());
    if (!verify) {
      data[i] = expected;
    } else if (!SameBits(data[i], expected)) {
      Record(static_cast<unsigned long long>(i) * sizeof(T), results);
    }
  }
}

// Bytes [begin, end) of `block` that are not the guard byte; offsets from
// the block's start.
__global__ void GuardScanKernel(const uint8_t* block, int64_t begin, int64_t end,
                                unsigned long long* results) {
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < end;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (block[i] != kGuardByte) Record(static_cast<unsigned long long>(i), results);
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
void LaunchUniform(void* data, int64_t count, uint64_t seed, float scale, bool verify,
                   unsigned long long* results, cudaStream_t stream) {
  UniformKernel<T><<<Blocks(count), kThreads, 0, stream>>>(static_cast<T*>(data), count, seed,
                                                           scale, verify, results);
}

absl::Status Uniform(DType dtype, void* data, int64_t count, uint64_t seed, float scale,
                     bool verify, unsigned long long* results, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat32:
      LaunchUniform<float>(data, count, seed, scale, verify, results, stream);
      break;
    case DType::kFloat16:
      LaunchUniform<__half>(data, count, seed, scale, verify, results, stream);
      break;
    case DType::kBFloat16:
      LaunchUniform<__nv_bfloat16>(data, count, seed, scale, verify, results, stream);
      break;
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <typename T>
void LaunchOutputScan(const void* data, int64_t count, unsigned long long* results,
                      cudaStream_t stream) {
  OutputScanKernel<T><<<Blocks(count), kThreads, 0, stream>>>(static_cast<const T*>(data), count,
                                                              results);
}

}  // namespace

absl::StatusOr<ProbeBuffers::Guarded> ProbeBuffers::Allocate(size_t bytes) {
  Guarded buffer;
  buffer.bytes = bytes;
  buffer.capacity = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  buffer.guard = std::clamp(buffer.capacity, kMinGuard, kMaxGuard) / 256 * 256;
  ASSIGN_OR_RETURN(buffer.block, DeviceBuffer::Create(buffer.capacity + 2 * buffer.guard));
  RETURN_IF_ERROR(ResetBlock(buffer));
  return buffer;
}

absl::Status ProbeBuffers::ResetBlock(const Guarded& buffer) {
  CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(buffer.block.data(), kGuardByte, buffer.block.bytes(), stream_));
  return absl::OkStatus();
}

absl::StatusOr<ProbeBuffers> ProbeBuffers::Create(const ConvLayerProblem& problem,
                                                  cudaStream_t stream, uint64_t seed) {
  ProbeBuffers probe(problem, stream);
  const size_t element = DTypeSize(problem.dtype);
  int64_t fan_in = 1;
  for (size_t d = 1; d < problem.weights.size(); ++d) fan_in *= problem.weights[d];
  probe.x_fill_ = {NumElements(problem.input), seed, 1.0f};
  probe.w_fill_ = {NumElements(problem.weights), seed + 1,
                   1.0f / std::sqrt(static_cast<float>(fan_in))};
  probe.bias_fill_ = {problem.output[1], seed + 2, 1.0f};
  probe.narrow_fill_ = {DirectNarrowPackedBytes(problem) / static_cast<int64_t>(element),
                        seed + 3, probe.w_fill_.scale};
  ASSIGN_OR_RETURN(probe.x_, probe.Allocate(probe.x_fill_.count * element));
  ASSIGN_OR_RETURN(probe.w_, probe.Allocate(probe.w_fill_.count * element));
  ASSIGN_OR_RETURN(probe.bias_, probe.Allocate(probe.bias_fill_.count * element));
  if (probe.narrow_fill_.count > 0) {
    ASSIGN_OR_RETURN(probe.narrow_w_, probe.Allocate(probe.narrow_fill_.count * element));
  }
  ASSIGN_OR_RETURN(probe.y_, probe.Allocate(NumElements(problem.output) * element));
  ASSIGN_OR_RETURN(probe.workspace_, probe.Allocate(0));
  ASSIGN_OR_RETURN(probe.results_, DeviceBuffer::Create(kSlots * sizeof(unsigned long long)));
  return probe;
}

absl::Status ProbeBuffers::ReserveWorkspace(int64_t bytes) {
  if (static_cast<int64_t>(workspace_.capacity) < bytes) {
    ASSIGN_OR_RETURN(workspace_, Allocate(bytes));
  }
  workspace_.bytes = bytes;  // the rest of the capacity is guard from now on
  return absl::OkStatus();
}

ConvLayerBuffers ProbeBuffers::buffers() const {
  ConvLayerBuffers b;
  b.x = x_.data();
  b.w = w_.data();
  // Timed as the layer runs with its rounded copy (values do not matter).
  b.w_tf32 = problem_.dtype == DType::kFloat32 ? w_.data() : nullptr;
  b.w_narrow = narrow_fill_.count > 0 ? narrow_w_.data() : nullptr;
  b.bias = problem_.has_bias ? bias_.data() : nullptr;
  b.y = y_.data();
  b.workspace = workspace_.data();
  return b;
}

absl::Status ProbeBuffers::Reset() {
  for (const Guarded* buffer : {&x_, &w_, &bias_, &y_, &workspace_}) {
    RETURN_IF_ERROR(ResetBlock(*buffer));
  }
  if (narrow_fill_.count > 0) RETURN_IF_ERROR(ResetBlock(narrow_w_));
  const std::pair<const Guarded*, const Fill*> inputs[] = {
      {&x_, &x_fill_}, {&w_, &w_fill_}, {&bias_, &bias_fill_}, {&narrow_w_, &narrow_fill_}};
  for (const auto& [buffer, fill] : inputs) {
    if (fill->count == 0) continue;  // narrow_w_ where the narrow GEMM does not run
    RETURN_IF_ERROR(Uniform(problem_.dtype, buffer->data(), fill->count, fill->seed, fill->scale,
                            /*verify=*/false, nullptr, stream_));
  }
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(y_.data(), 0xFF, y_.bytes, stream_));
  return absl::OkStatus();
}

absl::Status ProbeBuffers::CheckGuards(const Guarded& buffer, const char* name, bool* ok,
                                       std::string* report) {
  unsigned long long* results = static_cast<unsigned long long*>(results_.data());
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(results, 0, kSlots * sizeof(unsigned long long), stream_));
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(results + kFirst, 0xFF, sizeof(unsigned long long), stream_));
  const uint8_t* block = static_cast<const uint8_t*>(buffer.block.data());
  // Byte by byte: the zone before the data, then everything after the bytes
  // in use (unused capacity included), to the block's end.
  const int64_t guard = static_cast<int64_t>(buffer.guard);
  const int64_t after = guard + static_cast<int64_t>(buffer.bytes);
  const int64_t end = static_cast<int64_t>(buffer.block.bytes());
  GuardScanKernel<<<Blocks(guard), kThreads, 0, stream_>>>(block, 0, guard, results);
  GuardScanKernel<<<Blocks(end - after), kThreads, 0, stream_>>>(block, after, end, results);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  unsigned long long host[kSlots];
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, results, sizeof(host), cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (host[kMismatches] > 0) {
    *ok = false;
    absl::StrAppend(report, report->empty() ? "" : "; ", "wrote ", host[kMismatches],
                    " bytes outside ", name, " (", buffer.bytes, " bytes), at offsets ",
                    static_cast<long long>(host[kFirst]) - guard, " to ",
                    static_cast<long long>(host[kLast]) - guard, " from its start");
  }
  return absl::OkStatus();
}

absl::Status ProbeBuffers::CheckInput(const Guarded& buffer, const Fill& fill, const char* name,
                                      bool* ok, std::string* report) {
  unsigned long long* results = static_cast<unsigned long long*>(results_.data());
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(results, 0, kSlots * sizeof(unsigned long long), stream_));
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(results + kFirst, 0xFF, sizeof(unsigned long long), stream_));
  RETURN_IF_ERROR(Uniform(problem_.dtype, buffer.data(), fill.count, fill.seed, fill.scale,
                          /*verify=*/true, results, stream_));
  unsigned long long host[kSlots];
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, results, sizeof(host), cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (host[kMismatches] > 0) {
    *ok = false;
    absl::StrAppend(report, report->empty() ? "" : "; ", "changed ", host[kMismatches],
                    " elements of its input ", name, ", from byte ",
                    static_cast<long long>(host[kFirst]));
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
  RETURN_IF_ERROR(CheckInput(x_, x_fill_, "x", &ok, &report));
  RETURN_IF_ERROR(CheckInput(w_, w_fill_, "w", &ok, &report));
  if (problem_.has_bias) RETURN_IF_ERROR(CheckInput(bias_, bias_fill_, "bias", &ok, &report));
  if (narrow_fill_.count > 0) {
    RETURN_IF_ERROR(CheckGuards(narrow_w_, "packed w", &ok, &report));
    RETURN_IF_ERROR(CheckInput(narrow_w_, narrow_fill_, "packed w", &ok, &report));
  }
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
