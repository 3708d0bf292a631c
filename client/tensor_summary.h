// A short human-readable summary of a tensor's values.
#ifndef CONVSERVE_CLIENT_TENSOR_SUMMARY_H_
#define CONVSERVE_CLIENT_TENSOR_SUMMARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "convserve/v1/convserve.pb.h"

namespace convserve {

struct TensorSummary {
  int64_t count = 0;
  int64_t non_finite = 0;
  double min = 0, max = 0, mean = 0, l2 = 0;
  // FNV-1a 64 of the raw bytes: equal outputs print equal checksums.
  uint64_t checksum = 0;
  std::vector<float> first;
};

TensorSummary Summarize(v1::DataType type, const std::string& bytes);
// "[1, 8, 16, 16] FLOAT32: min=... max=... mean=... l2=... fnv1a64=... first=[...]".
std::string FormatSummary(const std::vector<int64_t>& shape, v1::DataType type,
                          const TensorSummary& summary);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_TENSOR_SUMMARY_H_
