#include "engine/tensor.h"

#include <cstring>

#include "absl/strings/str_join.h"

namespace convserve {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

const char* LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kNCHW:
      return "NCHW";
    case Layout::kNHWC:
      return "NHWC";
    case Layout::kNCDHW:
      return "NCDHW";
    case Layout::kNDHWC:
      return "NDHWC";
  }
  return "unknown";
}

int SpatialRank(Layout layout) {
  return layout == Layout::kNCDHW || layout == Layout::kNDHWC ? 3 : 2;
}

bool IsChannelsLast(Layout layout) {
  return layout == Layout::kNHWC || layout == Layout::kNDHWC;
}

int64_t NumElements(const Shape& shape) {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  return "[" + absl::StrJoin(shape, ", ") + "]";
}

Shape PhysicalShape(const Shape& logical, bool channels_last) {
  if (!channels_last || logical.size() < 3) return logical;
  Shape physical;
  physical.push_back(logical[0]);
  physical.insert(physical.end(), logical.begin() + 2, logical.end());
  physical.push_back(logical[1]);
  return physical;
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0x1f) {  // inf or NaN
    out = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // zero
    out = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3ffu;
    out = sign | (exponent << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &out, sizeof(value));
  return value;
}

uint16_t FloatToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN; keep NaN quiet and non-zero
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal/zero
    if (abs < 0x33000000u) return sign;  // < 2^-25 rounds to zero
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24 bits dropped below 2^-24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  // Normal: rebias exponent, round 13 dropped mantissa bits to nearest even.
  uint32_t half = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

float BFloat16ToFloat(uint16_t bits) {
  const uint32_t x = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &x, sizeof(value));
  return value;
}

uint16_t FloatToBFloat16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it NaN after truncation
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

void ToFloat(DType dtype, const void* src, float* dst, size_t count) {
  // An empty tensor's pointers may be null (an empty std::vector's data()),
  // and memcpy's may not be, even for 0 bytes.
  if (count == 0) return;
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kFloat16:
    case DType::kBFloat16: {
      const auto* bytes = static_cast<const unsigned char*>(src);
      const bool half = dtype == DType::kFloat16;
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, sizeof(bits));
        dst[i] = half ? HalfToFloat(bits) : BFloat16ToFloat(bits);
      }
      return;
    }
  }
}

void FromFloat(DType dtype, const float* src, void* dst, size_t count) {
  if (count == 0) return;  // as in ToFloat
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kFloat16:
    case DType::kBFloat16: {
      auto* bytes = static_cast<unsigned char*>(dst);
      const bool half = dtype == DType::kFloat16;
      for (size_t i = 0; i < count; ++i) {
        const uint16_t bits = half ? FloatToHalf(src[i]) : FloatToBFloat16(src[i]);
        std::memcpy(bytes + 2 * i, &bits, sizeof(bits));
      }
      return;
    }
  }
}

float RoundToTf32(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  if ((x & 0x7f800000u) == 0x7f800000u) return value;  // inf or NaN
  x = (x + 0xfffu + ((x >> 13) & 1u)) & 0xffffe000u;  // past the largest TF32: inf
  std::memcpy(&value, &x, sizeof(x));
  return value;
}

void RoundToDType(DType dtype, float* values, size_t count) {
  switch (dtype) {
    case DType::kFloat32:
      return;
    case DType::kFloat16:
      for (size_t i = 0; i < count; ++i) values[i] = HalfToFloat(FloatToHalf(values[i]));
      return;
    case DType::kBFloat16:
      for (size_t i = 0; i < count; ++i) {
        values[i] = BFloat16ToFloat(FloatToBFloat16(values[i]));
      }
      return;
  }
}

namespace {

// Splits a logical shape into batch, channels and the product of spatial dims.
void SplitShape(const Shape& shape, int64_t* n, int64_t* c, int64_t* spatial) {
  *n = shape.empty() ? 0 : shape[0];
  *c = shape.size() > 1 ? shape[1] : 1;
  *spatial = 1;
  for (size_t i = 2; i < shape.size(); ++i) *spatial *= shape[i];
}

}  // namespace

void ChannelsLastToFirst(const Shape& shape, const float* src, float* dst) {
  int64_t n, c, spatial;
  SplitShape(shape, &n, &c, &spatial);
  for (int64_t b = 0; b < n; ++b) {
    const float* in = src + b * c * spatial;
    float* out = dst + b * c * spatial;
    for (int64_t s = 0; s < spatial; ++s) {
      for (int64_t ch = 0; ch < c; ++ch) out[ch * spatial + s] = in[s * c + ch];
    }
  }
}

void ChannelsFirstToLast(const Shape& shape, const float* src, float* dst) {
  int64_t n, c, spatial;
  SplitShape(shape, &n, &c, &spatial);
  for (int64_t b = 0; b < n; ++b) {
    const float* in = src + b * c * spatial;
    float* out = dst + b * c * spatial;
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t s = 0; s < spatial; ++s) out[s * c + ch] = in[ch * spatial + s];
    }
  }
}

}  // namespace convserve
