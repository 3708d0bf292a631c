#include "engine/cudnn/conv_layer_plan.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/bias_activation.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/direct_conv_kernel.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

constexpr int64_t kScratchAlignment = 256;

absl::StatusOr<BackendDescriptor> MakeVariantPack(const ConvLayerPlan& plan,
                                                  const ConvLayerProblem& problem,
                                                  const ConvLayerBuffers& buffers,
                                                  void* conv_output) {
  std::vector<int64_t> uids = {kUidX, kUidW, kUidY};
  std::vector<void*> pointers = {const_cast<void*>(buffers.x), const_cast<void*>(buffers.w),
                                 conv_output};
  if (plan.path() == LayerPath::kFused && problem.has_bias) {
    uids.push_back(kUidBias);
    pointers.push_back(const_cast<void*>(buffers.bias));
  }
  ASSIGN_OR_RETURN(BackendDescriptor pack,
                   BackendDescriptor::Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  RETURN_IF_ERROR(pack.SetInt64s(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids));
  RETURN_IF_ERROR(pack.Set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                           static_cast<int64_t>(pointers.size()), pointers.data()));
  void* workspace = buffers.workspace;
  RETURN_IF_ERROR(pack.Set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
  RETURN_IF_ERROR(pack.Finalize());
  return pack;
}

}  // namespace

absl::Status ConvLayerPlan::Bind(const ConvLayerProblem& problem,
                                 const ConvLayerBuffers& buffers) {
  bound_ = false;
  if (path() == LayerPath::kDirect) {
    RETURN_IF_ERROR(CheckDirectConvBuffers(problem, buffers));
    bound_buffers_ = buffers;
    bound_ = true;
    return absl::OkStatus();
  }
  void* conv_output = scratch_bytes_ > 0
                          ? static_cast<char*>(buffers.workspace) + scratch_offset_
                          : buffers.y;
  ASSIGN_OR_RETURN(bound_pack_, MakeVariantPack(*this, problem, buffers, conv_output));
  bound_buffers_ = buffers;
  bound_ = true;
  return absl::OkStatus();
}

absl::Status ConvLayerPlan::RunBound(cudnnHandle_t handle, cudaStream_t stream,
                                     const ConvLayerProblem& problem) const {
  if (!bound_) return absl::InternalError("layer plan was never bound");
  if (path() == LayerPath::kDirect) {
    return LaunchDirectConv(problem, id_, bound_buffers_, stream);
  }
  if (programmatic_entry_) RETURN_IF_ERROR(EnterNextProgrammatically(stream));
  CUDNN_RETURN_IF_ERROR(cudnnBackendExecute(handle, plan_.get(), bound_pack_.get()));
  if (path() == LayerPath::kFused || !problem.needs_epilogue()) return absl::OkStatus();
  BiasActivationArgs args;
  args.dtype = problem.dtype;
  args.channels_last = problem.channels_last;
  args.batch = problem.output[0];
  args.channels = problem.output[1];
  args.spatial = NumElements(problem.output) / (problem.output[0] * problem.output[1]);
  args.y = bound_buffers_.y;
  if (scratch_bytes_ > 0) {
    args.float_input = static_cast<const char*>(bound_buffers_.workspace) + scratch_offset_;
  }
  args.bias = problem.has_bias ? bound_buffers_.bias : nullptr;
  args.activation = problem.activation;
  return LaunchBiasActivation(args, stream);
}

absl::StatusOr<CandidateSet> ConvLayerPlanner::Candidates(const ConvLayerProblem& problem,
                                                          LayerPath path) {
  if (path != LayerPath::kDirect) {
    return FindEngineCandidates(handle_, problem, path, selection_, target_);
  }
  if (std::string why = DirectConvRejection(problem); !why.empty()) {
    return absl::UnimplementedError(why);
  }
  CandidateSet set;
  for (EngineConfigId& id : DirectConvConfigs(problem)) {
    if (std::string why = ConfigRejection(selection_, target_, problem, id); !why.empty()) {
      set.skipped.push_back(absl::StrCat(id.ToString(), ": ", why));
      continue;
    }
    EngineCandidate candidate;
    candidate.id = std::move(id);
    set.candidates.push_back(std::move(candidate));
  }
  return set;
}

absl::StatusOr<CandidateSet> ConvLayerPlanner::KnobNeighbours(
    const ConvLayerProblem& problem, std::shared_ptr<const ConvOperationGraph> graph,
    const EngineConfigId& center, const std::vector<EngineConfigId>& exclude, int max) {
  return FindKnobNeighbours(std::move(graph), problem, center, exclude, max, selection_, target_);
}

absl::StatusOr<CandidateSet> ConvLayerPlanner::Named(
    std::shared_ptr<const ConvOperationGraph> graph, const EngineConfigId& id) {
  CandidateSet set;
  ASSIGN_OR_RETURN(EngineCandidate candidate, RebuildEngineCandidate(*graph, id));
  set.graph = std::move(graph);
  set.candidates.push_back(std::move(candidate));
  return set;
}

absl::StatusOr<ConvLayerPlan> ConvLayerPlanner::Finalize(const ConvLayerProblem& problem,
                                                         CandidateSet& set, size_t index) {
  return FinalizeCandidate(problem, set.graph, std::move(set.candidates[index]));
}

absl::StatusOr<ConvLayerPlan> ConvLayerPlanner::BuildConfig(const ConvLayerProblem& problem,
                                                            const EngineConfigId& id) {
  if (id.path == LayerPath::kDirect) {
    if (std::string why = DirectConfigRejection(problem, id); !why.empty()) {
      return absl::NotFoundError(absl::StrCat("engine config ", id.ToString(),
                                              " cannot be built for ", problem.Describe(), ": ",
                                              why));
    }
    EngineCandidate candidate;
    candidate.id = id;
    return FinalizeCandidate(problem, nullptr, std::move(candidate));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const ConvOperationGraph> graph,
                   BuildConvOperationGraph(handle_, problem, id.path));
  absl::StatusOr<EngineCandidate> candidate = RebuildEngineCandidate(*graph, id);
  if (!candidate.ok()) {
    return absl::NotFoundError(absl::StrCat("engine config ", id.ToString(),
                                            " cannot be rebuilt for ", problem.Describe(), ": ",
                                            candidate.status().message()));
  }
  return FinalizeCandidate(problem, std::move(graph), *std::move(candidate));
}

absl::StatusOr<ConvLayerPlan> ConvLayerPlanner::FinalizeCandidate(
    const ConvLayerProblem& problem, std::shared_ptr<const ConvOperationGraph> graph,
    EngineCandidate candidate) {
  ConvLayerPlan plan;
  plan.id_ = candidate.id;
  if (plan.path() == LayerPath::kDirect) {
    plan.candidate_ = std::move(candidate);
    return plan;
  }
  ASSIGN_OR_RETURN(plan.plan_, BackendDescriptor::Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
  RETURN_IF_ERROR(plan.plan_.Set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_));
  RETURN_IF_ERROR(
      plan.plan_.SetDescriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, candidate.config));
  RETURN_IF_ERROR(plan.plan_.Finalize());
  int64_t count = 0, cudnn_workspace = 0;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(plan.plan_.get(),
                                                 CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &count, &cudnn_workspace));
  if (cudnn_workspace > selection_.max_workspace_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("needs ", cudnn_workspace,
                                                     " workspace bytes, over the limit of ",
                                                     selection_.max_workspace_bytes));
  }
  plan.scratch_offset_ =
      (cudnn_workspace + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
  if (UsesFloatScratch(problem, plan.path())) {
    plan.scratch_bytes_ = NumElements(problem.output) * static_cast<int64_t>(sizeof(float));
  }
  plan.graph_ = std::move(graph);
  plan.candidate_ = std::move(candidate);
  return plan;
}

}  // namespace convserve
