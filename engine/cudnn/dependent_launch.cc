#include "engine/cudnn/dependent_launch.h"

#include <atomic>
#include <vector>

#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/direct_conv_kernel.h"

namespace convserve {
namespace {

std::atomic<bool> dependent_launch{true};
std::atomic<bool> programmatic_entry{true};

}  // namespace

void SetDependentLaunch(bool on) { dependent_launch.store(on, std::memory_order_relaxed); }

bool DependentLaunchEnabled() { return dependent_launch.load(std::memory_order_relaxed); }
void SetProgrammaticEntry(bool on) { programmatic_entry.store(on, std::memory_order_relaxed); }
bool ProgrammaticEntryEnabled() {
  return DependentLaunchEnabled() && programmatic_entry.load(std::memory_order_relaxed);
}

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

absl::Status EnterNextProgrammatically(cudaStream_t stream) {
  if (!ProgrammaticEntryEnabled()) return absl::OkStatus();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* last = nullptr;
  size_t count = 0;
  CUDA_RETURN_IF_ERROR(
      cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &last, nullptr, &count));
  if (status != cudaStreamCaptureStatusActive || count == 0) return absl::OkStatus();
  std::vector<cudaGraphNode_t> nodes(last, last + count);
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CUDA_RETURN_IF_ERROR(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeKernel) return absl::OkStatus();
  }
  std::vector<cudaGraphEdgeData> edges(count);
  for (cudaGraphEdgeData& edge : edges) {
    edge = {};
    edge.from_port = cudaGraphKernelNodePortProgrammatic;
    edge.type = cudaGraphDependencyTypeProgrammatic;
  }
  CUDA_RETURN_IF_ERROR(cudaStreamUpdateCaptureDependencies(stream, nodes.data(), edges.data(),
                                                           count,
                                                           cudaStreamSetCaptureDependencies));
  return absl::OkStatus();
}

}  // namespace convserve
