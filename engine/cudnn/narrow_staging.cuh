// How the narrow GEMM (engine/cudnn/direct_narrow.cu) copies its weights
// and a tile's new input rows into shared memory, 16 bytes a load where
// the rows start on 16-byte boundaries: the layer's sizes as the kernel
// sees them, and the copies.
#ifndef CONVSERVE_ENGINE_CUDNN_NARROW_STAGING_CUH_
#define CONVSERVE_ENGINE_CUDNN_NARROW_STAGING_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "engine/cudnn/device_dtype.cuh"
#include "engine/cudnn/direct_conv_kernel.h"
#include "engine/cudnn/fast_divisor.h"

namespace convserve {
namespace narrow {

// Elements of a 16-byte group.
template <typename T>
constexpr int kGroup = 16 / static_cast<int>(sizeof(T));

struct NarrowDims : DirectConvDims {
  int row, groups, steps, pixel_step, weight_stride, input_stride, span;
  int column_tiles;  // tiles per output row
  int tiles;         // n * column_tiles * p
  // The divisions of the kernel's copy loops and tile order, by sizes fixed
  // at launch: input_stride, weight_stride / kGroup (row_groups), groups,
  // span, p, column_tiles, staged_groups, row and R * row (a kernel row's and
  // a channel's weights). Divided at run time they cost about 20
  // instructions each, several per staged element.
  FastDivisor by_input_stride, by_row_groups, by_groups, by_span, by_p, by_column_tiles,
      by_staged_groups, by_row, by_kernel;
  // A multiple of span at least pad_h, so an input row plus it is >= 0.
  int wrap_bias;
  // Where input rows start on 16-byte boundaries (W*C a multiple of a
  // group): every tile's staged rows start `vector_phase` elements past a
  // group's start and span `staged_groups` groups of the input row. -1
  // otherwise: staged element by element.
  int vector_phase, staged_groups;
};

// The value a staged element holds: float32 rounded to TF32 (Tf32Bits),
// the 16-bit types as they are.
template <typename T>
__device__ inline T Staged(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return __uint_as_float(Tf32Bits(v));
  } else {
    return v;
  }
}

// Input row `h` (>= -pad_h) modulo span: its slot in the ring.
__device__ inline int RingSlot(const NarrowDims& d, int h) {
  const int x = h + d.wrap_bias;
  return d.by_span.Remainder(x, d.by_span.Divide(x));
}

// Loads a thread has in flight before it stores them, when staging.
constexpr int kStageBatch = 8;

// 16-bit weights, one 16-byte store a group of the layout: group i of
// channel c holds kernel row i / groups, elements (i % groups) * kGroup on,
// each loaded on its own (4 groups in flight).
template <typename T, int kChannels, int kThreads>
__device__ inline void CopyWeightsByElement(const T* w, const NarrowDims& d, T* weights,
                                            int channel0) {
  static_assert(sizeof(T) == 2, "float32 weights are copied by group");
  constexpr int kG = kGroup<T>;
  const int row_groups = d.weight_stride / kG;
#pragma unroll 4
  for (int i = threadIdx.x; i < kChannels * row_groups; i += kThreads) {
    const int channel = d.by_row_groups.Divide(i), group = i - channel * row_groups;
    const int r = d.by_groups.Divide(group), first = (group - r * d.groups) * kG;
    const bool real = r < d.r && channel0 + channel < d.k;
    const T* source = w + ((channel0 + channel) * d.r + r) * d.row + first;
    union {
      T v[kG];
      uint4 bits;
    } values;
#pragma unroll
    for (int e = 0; e < kG; ++e) {
      values.v[e] = real && first + e < d.row ? source[e] : FromFloat<T>(0.f);
    }
    *reinterpret_cast<uint4*>(weights + i * kG) = values.bits;
  }
}

// Float32 weights 16 bytes a load: in KRSC the block's channels are one run
// of R * row elements a channel, which starts and ends on 16-byte
// boundaries (w aligned, channel0 a multiple of 64 and K of 8). All of a
// thread's loads are in flight at once (the stem's: 3 waits for the memory,
// not 6 as element by element), and each group's 4 elements are stored
// where they go, over zeros.
template <int kChannels, int kThreads>
__device__ inline void CopyWeightsByGroup(const float* w, const NarrowDims& d, float* weights,
                                          int channel0) {
  constexpr int kG = kGroup<float>;
  const int kernel = d.r * d.row, row_pitch = d.groups * kG;
  const int count = min(kChannels, d.k - channel0) * kernel / kG;
  const float4* run = reinterpret_cast<const float4*>(w + channel0 * kernel);
  for (int i = threadIdx.x; i < kChannels * d.weight_stride / kG; i += kThreads) {
    reinterpret_cast<float4*>(weights)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  __syncthreads();  // the zeros before the weights over them
  for (int base = threadIdx.x; base < count; base += kStageBatch * kThreads) {
    float4 values[kStageBatch];
#pragma unroll
    for (int j = 0; j < kStageBatch; ++j) {
      const int i = base + j * kThreads;
      values[j] = i < count ? __ldg(run + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int j = 0; j < kStageBatch; ++j) {
      const int i = base + j * kThreads;
      if (i >= count) break;
      // Where the group's first element goes; the others follow it, to the
      // next kernel row or channel at the end of one.
      const int channel = d.by_kernel.Divide(i * kG), in_channel = i * kG - channel * kernel;
      int r = d.by_row.Divide(in_channel), e = in_channel - r * d.row;
      float* to = weights + channel * d.weight_stride + r * row_pitch;
      const float elements[kG] = {values[j].x, values[j].y, values[j].z, values[j].w};
#pragma unroll
      for (int k = 0; k < kG; ++k) {
        to[e] = Staged(elements[k]);
        if (++e == d.row) {
          e = 0;
          to += row_pitch;
          if (++r == d.r) {
            r = 0;
            to += d.weight_stride - d.r * row_pitch;
          }
        }
      }
    }
  }
}

// The weights of output channels [channel0, channel0 + kChannels) as the
// MMAs read them: channel c's kernel row r at c * weight_stride + r *
// groups * kGroup, zeros after its `row` elements, after its R rows and for
// channels past K. Float32 (rounded to TF32) by group, the 16-bit types by
// element: what was faster for each. The 16-bit stem at batch 1 took 7.7
// us by group against 5.4 (a group's 8 elements cost more to place than
// its loads save), float32 10.3 against 12.1 (docs/cudnn.md, "Short
// kernel rows").
template <typename T, int kChannels, int kThreads>
__device__ inline void CopyWeights(const T* w, const NarrowDims& d, T* weights, int channel0) {
  if constexpr (sizeof(T) == 4) {
    CopyWeightsByGroup<kChannels, kThreads>(w, d, weights, channel0);
  } else {
    CopyWeightsByElement<T, kChannels, kThreads>(w, d, weights, channel0);
  }
}

// Input rows [from, from + rows) of image n, elements [first, first +
// input_stride) of each (zeros outside the image), into their ring slots,
// each twice (slots s and s + span), element by element.
template <typename T, int kThreads>
__device__ inline void StageByElement(const T* x, const NarrowDims& d, T* ring, int n, int from,
                                      int rows, int first) {
  const int row_elements = d.w * d.c, count = rows * d.input_stride;
  for (int base = threadIdx.x; base < count; base += kStageBatch * kThreads) {
    T values[kStageBatch];
#pragma unroll
    for (int j = 0; j < kStageBatch; ++j) {
      const int i = base + j * kThreads;
      const int row = d.by_input_stride.Divide(i), e = i - row * d.input_stride;
      const int h = from + row, at = first + e;
      const bool inside = i < count && h >= 0 && h < d.h && at >= 0 && at < row_elements;
      values[j] = inside ? Staged(x[(n * d.h + h) * row_elements + at]) : FromFloat<T>(0.f);
    }
    // Each element's row is computed again rather than kept from the
    // loads: the kernel is at its 128-register cap, and 16 loads with
    // their offsets kept spilled.
#pragma unroll
    for (int j = 0; j < kStageBatch; ++j) {
      const int i = base + j * kThreads;
      if (i >= count) break;
      const int row = d.by_input_stride.Divide(i);
      T* staged = ring + RingSlot(d, from + row) * d.input_stride + (i - row * d.input_stride);
      staged[0] = values[j];
      staged[d.span * d.input_stride] = values[j];
    }
  }
}

// Stores the elements of group `v` (staged elements e0 .. e0 + kGroup - 1;
// those outside [0, stride) are not stored) at `staged` and `copy`
// elements on. Lanes take consecutive groups, 16 bytes apart: storing the
// same word of each, lanes 8 apart would hit one bank, so lane L starts
// at word L / 8 (`turn`) and the 32 stores of an instruction fall in 32
// banks.
template <typename T>
__device__ inline void StoreGroup(const uint4& v, T* staged, int e0, int stride, int copy,
                                  int turn) {
  constexpr int kPerWord = kGroup<T> / 4;
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const unsigned word = turn == 0   ? words[q]
                          : turn == 1 ? words[(q + 1) & 3]
                          : turn == 2 ? words[(q + 2) & 3]
                                      : words[(q + 3) & 3];
#pragma unroll
    for (int p = 0; p < kPerWord; ++p) {
      const int e = e0 + ((q + turn) & 3) * kPerWord + p;
      if (static_cast<unsigned>(e) >= static_cast<unsigned>(stride)) continue;
      if constexpr (sizeof(T) == 4) {
        const float value = Staged(__uint_as_float(word));
        staged[e] = value;
        staged[e + copy] = value;
      } else {
        const auto bits = static_cast<unsigned short>(word >> (16 * p));
        reinterpret_cast<unsigned short*>(staged)[e] = bits;
        reinterpret_cast<unsigned short*>(staged)[e + copy] = bits;
      }
    }
  }
}

// StageByElement's rows, 16 bytes a load where d.vector_phase >= 0: group
// k of a row is input elements [first - vector_phase + k * kGroup, ...),
// all inside the row or all outside it. With 16 bytes a load a thread has
// all of a block's first tile (the stem's 7 rows) in flight at once, where
// element by element it waited for the memory 6 times.
template <typename T, int kThreads>
__device__ inline void StageByGroup(const T* x, const NarrowDims& d, T* ring, int n, int from,
                                    int rows, int first) {
  constexpr int kG = kGroup<T>;
  const int row_elements = d.w * d.c, count = rows * d.staged_groups;
  const int group0 = first - d.vector_phase;  // a multiple of kG
  const int turn = (threadIdx.x & 31) >> 3;
  for (int base = threadIdx.x; base < count; base += kStageBatch * kThreads) {
    uint4 values[kStageBatch];
#pragma unroll
    for (int j = 0; j < kStageBatch; ++j) {
      const int i = base + j * kThreads;
      const int row = d.by_staged_groups.Divide(i);
      const int h = from + row, at = group0 + (i - row * d.staged_groups) * kG;
      const bool inside = i < count && h >= 0 && h < d.h && at >= 0 && at < row_elements;
      values[j] = inside ? __ldg(reinterpret_cast<const uint4*>(x + (n * d.h + h) * row_elements +
                                                                at))
                         : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kStageBatch; ++j) {
      const int i = base + j * kThreads;
      if (i >= count) break;
      const int row = d.by_staged_groups.Divide(i);
      StoreGroup<T>(values[j], ring + RingSlot(d, from + row) * d.input_stride,
                    (i - row * d.staged_groups) * kG - d.vector_phase, d.input_stride,
                    d.span * d.input_stride, turn);
    }
  }
}

// A tile's new input rows into the ring: by group where every row starts
// on one (d.vector_phase >= 0), else by element.
template <typename T, int kThreads>
__device__ inline void StageRows(const T* x, const NarrowDims& d, T* ring, int n, int from,
                                 int rows, int first) {
  if (d.vector_phase >= 0) {
    StageByGroup<T, kThreads>(x, d, ring, n, from, rows, first);
  } else {
    StageByElement<T, kThreads>(x, d, ring, n, from, rows, first);
  }
}

}  // namespace narrow
}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_NARROW_STAGING_CUH_
