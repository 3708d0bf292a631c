// How the narrow GEMM (engine/cudnn/direct_narrow.cu) copies a tile's new
// input rows into shared memory, 16 bytes a load where the rows start on
// 16-byte boundaries: the layer's sizes as the kernel sees them, and the
// copies. (Its weights come packed, DirectNarrowPackedWeights.)
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
  // at launch: input_stride, groups, span, p, column_tiles and
  // staged_groups. Divided at run time they cost about 20 instructions
  // each, several per staged element.
  FastDivisor by_input_stride, by_groups, by_span, by_p, by_column_tiles, by_staged_groups;
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
