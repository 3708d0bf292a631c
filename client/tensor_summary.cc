#include "client/tensor_summary.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/graph_file.h"
#include "engine/tensor.h"

namespace convserve {

TensorSummary Summarize(v1::DataType type, const std::string& bytes) {
  TensorSummary s;
  s.checksum = 1469598103934665603ull;
  for (unsigned char c : bytes) s.checksum = (s.checksum ^ c) * 1099511628211ull;
  const int size = ElementSize(type);
  if (size == 0) return s;
  s.count = static_cast<int64_t>(bytes.size()) / size;
  std::vector<float> values(s.count);
  const DType dtype = type == v1::FLOAT16    ? DType::kFloat16
                      : type == v1::BFLOAT16 ? DType::kBFloat16
                                             : DType::kFloat32;
  ToFloat(dtype, bytes.data(), values.data(), values.size());
  s.min = std::numeric_limits<double>::infinity();
  s.max = -s.min;
  double sum = 0, squares = 0;
  for (float v : values) {
    if (!std::isfinite(v)) {
      ++s.non_finite;
      continue;
    }
    s.min = std::min<double>(s.min, v);
    s.max = std::max<double>(s.max, v);
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  const int64_t finite = s.count - s.non_finite;
  if (finite > 0) {
    s.mean = sum / finite;
    s.l2 = std::sqrt(squares);
  } else {
    s.min = s.max = 0;
  }
  values.resize(std::min<size_t>(values.size(), 4));
  s.first = values;
  return s;
}

std::string FormatSummary(const std::vector<int64_t>& shape, v1::DataType type,
                          const TensorSummary& s) {
  std::string out = absl::StrFormat(
      "[%s] %s: min=%.6g max=%.6g mean=%.6g l2=%.6g fnv1a64=%016x first=[%s]",
      absl::StrJoin(shape, ", "), v1::DataType_Name(type), s.min, s.max, s.mean, s.l2,
      s.checksum,
      absl::StrJoin(s.first, ", ", [](std::string* o, float v) {
        absl::StrAppend(o, absl::StrFormat("%.6g", v));
      }));
  if (s.non_finite > 0) absl::StrAppend(&out, " non_finite=", s.non_finite);
  return out;
}

}  // namespace convserve
