// Random tensor bytes for tests and benchmarks: fresh data, never zeros.
#ifndef CONVSERVE_TESTS_TEST_UTIL_RANDOM_TENSOR_H_
#define CONVSERVE_TESTS_TEST_UTIL_RANDOM_TENSOR_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace convserve {

// `count` uniform values in [-scale, scale], encoded in `dtype`.
inline std::string RandomTensor(DType dtype, int64_t count, float scale, std::mt19937_64* rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> values(count);
  for (float& v : values) v = dist(*rng);
  std::string bytes(count * DTypeSize(dtype), '\0');
  FromFloat(dtype, values.data(), bytes.data(), values.size());
  return bytes;
}

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_RANDOM_TENSOR_H_
