#include "engine/runtime/malloc_tuning.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace convserve {
namespace {

// Blocks up to this size come from the heaps and are reused; glibc's upper
// bound for the threshold on 64-bit systems.
constexpr int kMmapThresholdBytes = 32 << 20;
// Free memory at a heap's top kept before trimming; above a non-main
// arena's whole heap (64 MiB), so those are never trimmed.
constexpr int kTrimThresholdBytes = 256 << 20;

}  // namespace

std::string KeepFreedBlocksForReuse() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) {
    return "malloc settings from GLIBC_TUNABLES";
  }
  if (mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) != 1 ||
      mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) != 1) {
    return "malloc defaults (mallopt refused the settings)";
  }
  return "malloc keeps freed blocks below 32 MiB for reuse";
}

}  // namespace convserve
