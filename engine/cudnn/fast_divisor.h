// Division by a divisor fixed at launch, as a multiply-high, an add and a
// shift (Granlund and Montgomery, "Division by invariant integers using
// multiplication", 1994): with l = ceil(log2 d) and
// m = floor(2^32 (2^l - d) / d) + 1, n / d = (umulhi(m, n) + n) >> l for
// 0 <= n < 2^31 (the sum stays under 2^32). The host makes one per layer
// size; kernels divide with it instead of by a run-time value (about 20
// instructions a division). Host and device; plain data, copied by value.
#ifndef CONVSERVE_ENGINE_CUDNN_FAST_DIVISOR_H_
#define CONVSERVE_ENGINE_CUDNN_FAST_DIVISOR_H_

#include <cstdint>

#include "engine/host_device.h"

namespace convserve {

struct FastDivisor {
  int divisor = 1;
  uint32_t multiplier = 1;
  int shift = 0;

  // For 1 <= d < 2^31.
  static FastDivisor Of(int d) {
    FastDivisor f;
    f.divisor = d;
    while ((int64_t{1} << f.shift) < d) ++f.shift;
    f.multiplier = static_cast<uint32_t>(
        ((uint64_t{1} << 32) * ((uint64_t{1} << f.shift) - static_cast<uint64_t>(d))) /
            static_cast<uint64_t>(d) +
        1);
    return f;
  }
  // n / divisor, for 0 <= n < 2^31.
  CONVSERVE_HOST_DEVICE int Divide(int n) const {
    const uint32_t u = static_cast<uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(multiplier, u);
#else
    const uint32_t high = static_cast<uint32_t>((uint64_t{multiplier} * u) >> 32);
#endif
    return static_cast<int>((high + u) >> shift);
  }
  // n % divisor, given quotient = Divide(n).
  CONVSERVE_HOST_DEVICE int Remainder(int n, int quotient) const {
    return n - quotient * divisor;
  }
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_FAST_DIVISOR_H_
