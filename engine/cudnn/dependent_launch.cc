#include "engine/cudnn/dependent_launch.h"

#include <atomic>

#include "engine/cudnn/direct_conv_kernel.h"

namespace convserve {
namespace {

std::atomic<bool> dependent_launch{true};

}  // namespace

void SetDependentLaunch(bool on) { dependent_launch.store(on, std::memory_order_relaxed); }

bool DependentLaunchEnabled() { return dependent_launch.load(std::memory_order_relaxed); }

int AddDependentLaunchAttribute(cudaLaunchAttribute* attrs, int count) {
  if (!DependentLaunchEnabled() ||
      CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMajor, 0) < 9) {
    return count;
  }
  attrs[count] = {};
  attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[count].val.programmaticStreamSerializationAllowed = 1;
  return count + 1;
}

}  // namespace convserve
