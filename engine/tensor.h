// Data types, layouts, logical shapes and element conversion shared by every
// backend. No gRPC or protobuf types (DESIGN.md: engine stays below the wire).
#ifndef CONVSERVE_ENGINE_TENSOR_H_
#define CONVSERVE_ENGINE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace convserve {

enum class DType { kFloat32, kFloat16, kBFloat16 };

// Bytes per element.
size_t DTypeSize(DType dtype);
// "float32", "float16", "bfloat16".
const char* DTypeName(DType dtype);

// Byte order of a tensor. Dims are always named logically N, C, (D,) H, W.
enum class Layout { kNCHW, kNHWC, kNCDHW, kNDHWC };

const char* LayoutName(Layout layout);
// 2 for NCHW/NHWC, 3 for NCDHW/NDHWC.
int SpatialRank(Layout layout);
bool IsChannelsLast(Layout layout);

// Logical dims N, C, spatial...; for weights K, C/groups, spatial...
using Shape = std::vector<int64_t>;

// Product of dims; 0 for an empty shape.
int64_t NumElements(const Shape& shape);
// "[1, 3, 224, 224]".
std::string ShapeToString(const Shape& shape);
// The dims in the order the bytes are laid out: N, spatial..., C when
// channels_last, otherwise the logical order.
Shape PhysicalShape(const Shape& logical, bool channels_last);

// IEEE binary16 and bfloat16 <-> float, round to nearest even, NaN kept.
float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);
// `value` rounded to TF32 (10 mantissa bits, the low 13 zero) to nearest
// even, as cvt.rn.tf32.f32 rounds on sm_90; infinities and NaN kept.
float RoundToTf32(float value);

// Converts `count` little-endian elements of `dtype` at `src` to float.
// With `count` 0 the pointers may be null.
void ToFloat(DType dtype, const void* src, float* dst, size_t count);
// Converts `count` floats to `dtype`, rounding to nearest even.
void FromFloat(DType dtype, const float* src, void* dst, size_t count);
// Rounds each value to the nearest value representable in `dtype`.
void RoundToDType(DType dtype, float* values, size_t count);

// Reorders a dense tensor between channels-first (N, C, S...) and
// channels-last (N, S..., C), both given by the logical `shape`.
void ChannelsLastToFirst(const Shape& shape, const float* src, float* dst);
void ChannelsFirstToLast(const Shape& shape, const float* src, float* dst);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_TENSOR_H_
