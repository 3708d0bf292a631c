#include "engine/runtime/slice_copies.h"

#include <algorithm>
#include <cstdint>

#include "engine/cudnn/cudnn_status.h"

namespace convserve {
namespace {

// Ranges per launch: passed by value as the kernel's parameter (24 bytes
// each, well inside the 4 KB parameter space).
constexpr int kMaxRanges = 64;
constexpr int kThreads = 256;

struct Ranges {
  SliceCopy range[kMaxRanges];
};

// blockIdx.y picks the range; the blocks along x stride over its bytes. Where
// source and destination are equally misaligned, the bytes before the first
// 16-byte boundary go one by one, the body as 16-byte words, the tail one by
// one; otherwise every byte goes alone (small or odd tensors only).
__global__ void SliceCopyKernel(const Ranges ranges) {
  const SliceCopy& r = ranges.range[blockIdx.y];
  const uint8_t* from = static_cast<const uint8_t*>(r.from);
  uint8_t* to = static_cast<uint8_t*>(r.to);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uintptr_t misalignment = reinterpret_cast<uintptr_t>(from) % 16;
  if (misalignment != reinterpret_cast<uintptr_t>(to) % 16) {
    for (size_t i = first; i < r.bytes; i += stride) to[i] = from[i];
    return;
  }
  const size_t align = (16 - misalignment) % 16;
  const size_t head = align < r.bytes ? align : r.bytes;
  const size_t words = (r.bytes - head) / 16;
  const uint4* from_words = reinterpret_cast<const uint4*>(from + head);
  uint4* to_words = reinterpret_cast<uint4*>(to + head);
  for (size_t i = first; i < words; i += stride) to_words[i] = from_words[i];
  const size_t tail = head + words * 16;
  if (first < head) to[first] = from[first];
  if (tail + first < r.bytes) to[tail + first] = from[tail + first];
}

}  // namespace

absl::Status LaunchSliceCopies(const std::vector<SliceCopy>& copies, cudaStream_t stream) {
  for (size_t begin = 0; begin < copies.size(); begin += kMaxRanges) {
    const size_t count = std::min<size_t>(kMaxRanges, copies.size() - begin);
    Ranges ranges{};
    size_t largest = 0;
    for (size_t i = 0; i < count; ++i) {
      ranges.range[i] = copies[begin + i];
      largest = std::max(largest, copies[begin + i].bytes);
    }
    if (largest == 0) continue;
    // One 16-byte word per thread for the largest range, at most 1024
    // blocks per range (the loop strides over the rest).
    const size_t words = (largest + 15) / 16;
    const unsigned blocks =
        static_cast<unsigned>(std::min<size_t>((words + kThreads - 1) / kThreads, 1024));
    SliceCopyKernel<<<dim3(blocks, static_cast<unsigned>(count)), kThreads, 0, stream>>>(ranges);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return absl::OkStatus();
}

}  // namespace convserve
