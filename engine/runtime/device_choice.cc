#include "engine/runtime/device_choice.h"

namespace convserve {

int LeastLoadedDevice(absl::Span<const DeviceLoad> devices, size_t start) {
  const size_t n = devices.size();
  int best = -1;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    if (!devices[i].usable) continue;
    if (best < 0 || devices[i].outstanding < devices[best].outstanding) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

}  // namespace convserve
