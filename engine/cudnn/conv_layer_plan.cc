#include "engine/cudnn/conv_layer_plan.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/cudnn/bias_activation.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

// Unique ids of the tensors in a layer's operation graph.
constexpr int64_t kUidX = 1;
constexpr int64_t kUidW = 2;
constexpr int64_t kUidBias = 3;
constexpr int64_t kUidY = 4;
constexpr int64_t kUidConvOut = 5;
constexpr int64_t kUidBiasOut = 6;

cudnnDataType_t CudnnType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return CUDNN_DATA_FLOAT;
    case DType::kFloat16:
      return CUDNN_DATA_HALF;
    case DType::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
  }
  return CUDNN_DATA_FLOAT;
}

// Packed strides of logical dims (N, C, spatial...) stored channels-first or
// channels-last.
std::vector<int64_t> PackedStrides(const Shape& dims, bool channels_last) {
  const size_t rank = dims.size();
  std::vector<int64_t> strides(rank);
  if (!channels_last) {
    int64_t stride = 1;
    for (size_t d = rank; d-- > 0;) {
      strides[d] = stride;
      stride *= dims[d];
    }
    return strides;
  }
  int64_t stride = 1;
  strides[1] = stride;
  stride *= dims[1];
  for (size_t d = rank; d-- > 2;) {
    strides[d] = stride;
    stride *= dims[d];
  }
  strides[0] = stride;
  return strides;
}

absl::StatusOr<BackendDescriptor> MakeTensor(int64_t uid, cudnnDataType_t type, const Shape& dims,
                                             bool channels_last, bool is_virtual) {
  ASSIGN_OR_RETURN(BackendDescriptor tensor,
                   BackendDescriptor::Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  RETURN_IF_ERROR(tensor.SetDataType(CUDNN_ATTR_TENSOR_DATA_TYPE, type));
  RETURN_IF_ERROR(tensor.SetInt64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims));
  RETURN_IF_ERROR(tensor.SetInt64s(CUDNN_ATTR_TENSOR_STRIDES, PackedStrides(dims, channels_last)));
  RETURN_IF_ERROR(tensor.SetInt64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid));
  RETURN_IF_ERROR(tensor.SetInt64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16));
  const bool virtual_flag = is_virtual;
  RETURN_IF_ERROR(tensor.Set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virtual_flag));
  RETURN_IF_ERROR(tensor.Finalize());
  return tensor;
}

absl::StatusOr<BackendDescriptor> MakePointwise(cudnnPointwiseMode_t mode,
                                                const Activation& activation) {
  ASSIGN_OR_RETURN(BackendDescriptor pw, BackendDescriptor::Create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
  RETURN_IF_ERROR(pw.Set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  RETURN_IF_ERROR(pw.SetDataType(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_DATA_FLOAT));
  switch (mode) {
    case CUDNN_POINTWISE_RELU_FWD:
      RETURN_IF_ERROR(pw.SetDouble(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, 0.0));
      RETURN_IF_ERROR(pw.SetDouble(CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP,
                                   activation.has_upper_clip
                                       ? activation.upper_clip
                                       : std::numeric_limits<float>::max()));
      RETURN_IF_ERROR(
          pw.SetDouble(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, activation.negative_slope));
      break;
    case CUDNN_POINTWISE_ELU_FWD:
      RETURN_IF_ERROR(pw.SetDouble(CUDNN_ATTR_POINTWISE_ELU_ALPHA, activation.alpha));
      break;
    case CUDNN_POINTWISE_SOFTPLUS_FWD:
      RETURN_IF_ERROR(pw.SetDouble(CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA, activation.beta));
      break;
    case CUDNN_POINTWISE_SWISH_FWD:
      RETURN_IF_ERROR(pw.SetDouble(CUDNN_ATTR_POINTWISE_SWISH_BETA, activation.beta));
      break;
    default:
      break;
  }
  RETURN_IF_ERROR(pw.Finalize());
  return pw;
}

cudnnPointwiseMode_t ActivationMode(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::kRelu:
      return CUDNN_POINTWISE_RELU_FWD;
    case ActivationKind::kTanh:
      return CUDNN_POINTWISE_TANH_FWD;
    case ActivationKind::kSigmoid:
      return CUDNN_POINTWISE_SIGMOID_FWD;
    case ActivationKind::kElu:
      return CUDNN_POINTWISE_ELU_FWD;
    case ActivationKind::kGelu:
      return CUDNN_POINTWISE_GELU_FWD;
    case ActivationKind::kGeluTanh:
      return CUDNN_POINTWISE_GELU_APPROX_TANH_FWD;
    case ActivationKind::kSoftplus:
      return CUDNN_POINTWISE_SOFTPLUS_FWD;
    case ActivationKind::kSwish:
      return CUDNN_POINTWISE_SWISH_FWD;
    case ActivationKind::kIdentity:
      break;
  }
  return CUDNN_POINTWISE_IDENTITY;
}

absl::StatusOr<BackendDescriptor> MakePointwiseOp(const BackendDescriptor& pw,
                                                  const BackendDescriptor& x,
                                                  const BackendDescriptor* b,
                                                  const BackendDescriptor& y) {
  ASSIGN_OR_RETURN(BackendDescriptor op,
                   BackendDescriptor::Create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
  RETURN_IF_ERROR(op.SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw));
  RETURN_IF_ERROR(op.SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x));
  if (b != nullptr) RETURN_IF_ERROR(op.SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b));
  RETURN_IF_ERROR(op.SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y));
  RETURN_IF_ERROR(op.Finalize());
  return op;
}

// An operation graph and every descriptor it refers to.
struct OperationGraph {
  std::vector<BackendDescriptor> parts;
  BackendDescriptor graph;
};

// conv -> [add bias] -> [activation] when `fused`, else conv alone writing Y.
absl::StatusOr<OperationGraph> BuildOperationGraph(cudnnHandle_t handle,
                                                   const ConvLayerProblem& p, bool fused) {
  OperationGraph og;
  const cudnnDataType_t io = CudnnType(p.dtype);
  const bool bias = fused && p.has_bias;
  const bool act = fused && p.activation.kind != ActivationKind::kIdentity;
  ASSIGN_OR_RETURN(BackendDescriptor x, MakeTensor(kUidX, io, p.input, p.channels_last, false));
  ASSIGN_OR_RETURN(BackendDescriptor w, MakeTensor(kUidW, io, p.weights, p.channels_last, false));
  const bool conv_is_last = !bias && !act;
  ASSIGN_OR_RETURN(BackendDescriptor conv_out,
                   MakeTensor(conv_is_last ? kUidY : kUidConvOut,
                              conv_is_last ? io : CUDNN_DATA_FLOAT, p.output, p.channels_last,
                              !conv_is_last));

  ASSIGN_OR_RETURN(BackendDescriptor conv,
                   BackendDescriptor::Create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  const int64_t rank = static_cast<int64_t>(p.stride.size());
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  RETURN_IF_ERROR(conv.SetInt64(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, rank));
  RETURN_IF_ERROR(conv.SetDataType(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_DATA_FLOAT));
  RETURN_IF_ERROR(conv.Set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  RETURN_IF_ERROR(conv.SetInt64s(CUDNN_ATTR_CONVOLUTION_DILATIONS, p.dilation));
  RETURN_IF_ERROR(conv.SetInt64s(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, p.stride));
  RETURN_IF_ERROR(conv.SetInt64s(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, p.pad_before));
  RETURN_IF_ERROR(conv.SetInt64s(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, p.pad_after));
  RETURN_IF_ERROR(conv.Finalize());

  ASSIGN_OR_RETURN(BackendDescriptor conv_op, BackendDescriptor::Create(
                                                  CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR));
  RETURN_IF_ERROR(conv_op.SetDescriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x));
  RETURN_IF_ERROR(conv_op.SetDescriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w));
  RETURN_IF_ERROR(conv_op.SetDescriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, conv_out));
  RETURN_IF_ERROR(conv_op.SetDescriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv));
  RETURN_IF_ERROR(conv_op.SetFloat(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, 1.0f));
  RETURN_IF_ERROR(conv_op.SetFloat(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, 0.0f));
  RETURN_IF_ERROR(conv_op.Finalize());
  std::vector<cudnnBackendDescriptor_t> ops = {conv_op.get()};

  const BackendDescriptor* last = &conv_out;
  if (bias) {
    Shape bias_dims(p.output.size(), 1);
    bias_dims[1] = p.output[1];
    ASSIGN_OR_RETURN(BackendDescriptor b, MakeTensor(kUidBias, io, bias_dims, p.channels_last, false));
    ASSIGN_OR_RETURN(BackendDescriptor sum,
                     MakeTensor(act ? kUidBiasOut : kUidY, act ? CUDNN_DATA_FLOAT : io, p.output,
                                p.channels_last, act));
    ASSIGN_OR_RETURN(BackendDescriptor add, MakePointwise(CUDNN_POINTWISE_ADD, p.activation));
    ASSIGN_OR_RETURN(BackendDescriptor add_op, MakePointwiseOp(add, *last, &b, sum));
    ops.push_back(add_op.get());
    og.parts.push_back(std::move(b));
    og.parts.push_back(std::move(add));
    og.parts.push_back(std::move(add_op));
    og.parts.push_back(std::move(sum));
    last = &og.parts.back();
  }
  if (act) {
    ASSIGN_OR_RETURN(BackendDescriptor y, MakeTensor(kUidY, io, p.output, p.channels_last, false));
    ASSIGN_OR_RETURN(BackendDescriptor pw, MakePointwise(ActivationMode(p.activation.kind), p.activation));
    ASSIGN_OR_RETURN(BackendDescriptor act_op, MakePointwiseOp(pw, *last, nullptr, y));
    ops.push_back(act_op.get());
    og.parts.push_back(std::move(y));
    og.parts.push_back(std::move(pw));
    og.parts.push_back(std::move(act_op));
  }

  ASSIGN_OR_RETURN(og.graph, BackendDescriptor::Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  RETURN_IF_ERROR(og.graph.Set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
  RETURN_IF_ERROR(og.graph.SetDescriptors(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops));
  RETURN_IF_ERROR(og.graph.Finalize());
  og.parts.push_back(std::move(x));
  og.parts.push_back(std::move(w));
  og.parts.push_back(std::move(conv_out));
  og.parts.push_back(std::move(conv));
  og.parts.push_back(std::move(conv_op));
  return og;
}

// Engine configs from one heuristics mode, best first.
absl::StatusOr<std::vector<BackendDescriptor>> QueryHeuristics(const BackendDescriptor& graph,
                                                               cudnnBackendHeurMode_t mode) {
  ASSIGN_OR_RETURN(BackendDescriptor heur,
                   BackendDescriptor::Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  RETURN_IF_ERROR(heur.SetDescriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph));
  RETURN_IF_ERROR(heur.Set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  RETURN_IF_ERROR(heur.Finalize());
  int64_t count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                                 nullptr));
  std::vector<BackendDescriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(BackendDescriptor config,
                     BackendDescriptor::Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(config.get());
    configs.push_back(std::move(config));
  }
  int64_t returned = 0;
  if (count > 0) {
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                                   &returned, raw.data()));
  }
  configs.resize(std::min<int64_t>(returned, count));
  return configs;
}

struct EngineInfo {
  int64_t index = -1;
  std::vector<cudnnBackendNumericalNote_t> notes;
};

absl::StatusOr<EngineInfo> DescribeEngine(const BackendDescriptor& config) {
  ASSIGN_OR_RETURN(BackendDescriptor engine, BackendDescriptor::Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &raw));
  EngineInfo info;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                                 CUDNN_TYPE_INT64, 1, &count, &info.index));
  info.notes.resize(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(
      engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
      static_cast<int64_t>(info.notes.size()), &count, info.notes.data()));
  info.notes.resize(count);
  return info;
}

bool HasNote(const EngineInfo& info, cudnnBackendNumericalNote_t note) {
  return std::find(info.notes.begin(), info.notes.end(), note) != info.notes.end();
}

}  // namespace

std::vector<ConvLayerProblem> MakeLayerProblems(const Graph& graph, const Shape& input_shape,
                                                const std::vector<Shape>& outputs) {
  const GraphSpec& spec = graph.spec();
  std::vector<ConvLayerProblem> problems;
  Shape layer_input = input_shape;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const ConvLayerSpec& layer = spec.layers[i];
    ConvLayerProblem problem;
    problem.dtype = spec.dtype;
    problem.channels_last = IsChannelsLast(spec.layout);
    problem.input = layer_input;
    problem.weights = graph.WeightShape(i);
    problem.output = outputs[i];
    problem.stride = layer.stride;
    problem.dilation = layer.dilation;
    problem.pad_before = layer.pad_before;
    problem.pad_after = layer.pad_after;
    problem.has_bias = !layer.bias.empty();
    problem.activation = layer.activation;
    problems.push_back(std::move(problem));
    layer_input = outputs[i];
  }
  return problems;
}

const char* LayerPathName(LayerPath path) {
  return path == LayerPath::kFused ? "fused" : "unfused";
}

std::string ConvLayerProblem::Describe() const {
  return absl::StrCat(DTypeName(dtype), channels_last ? " channels-last" : " channels-first",
                      " x", ShapeToString(input), " w", ShapeToString(weights), " y",
                      ShapeToString(output), " stride [", absl::StrJoin(stride, ","),
                      "] dilation [", absl::StrJoin(dilation, ","), "] pad [",
                      absl::StrJoin(pad_before, ","), "]/[", absl::StrJoin(pad_after, ","), "]",
                      has_bias ? " +bias" : "", " ", ActivationName(activation.kind));
}

namespace {

absl::StatusOr<BackendDescriptor> MakeVariantPack(LayerPath path, const ConvLayerProblem& problem,
                                                  const ConvLayerBuffers& buffers) {
  std::vector<int64_t> uids = {kUidX, kUidW, kUidY};
  std::vector<void*> pointers = {const_cast<void*>(buffers.x), const_cast<void*>(buffers.w),
                                 buffers.y};
  if (path == LayerPath::kFused && problem.has_bias) {
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

absl::Status RunPlan(cudnnHandle_t handle, cudaStream_t stream, LayerPath path,
                     const BackendDescriptor& plan, const BackendDescriptor& pack,
                     const ConvLayerProblem& problem, const ConvLayerBuffers& buffers) {
  CUDNN_RETURN_IF_ERROR(cudnnBackendExecute(handle, plan.get(), pack.get()));
  if (path == LayerPath::kUnfused && problem.needs_epilogue()) {
    BiasActivationArgs args;
    args.dtype = problem.dtype;
    args.channels_last = problem.channels_last;
    args.batch = problem.output[0];
    args.channels = problem.output[1];
    args.spatial = NumElements(problem.output) / (problem.output[0] * problem.output[1]);
    args.y = buffers.y;
    args.bias = problem.has_bias ? buffers.bias : nullptr;
    args.activation = problem.activation;
    RETURN_IF_ERROR(LaunchBiasActivation(args, stream));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ConvLayerPlan::Bind(const ConvLayerProblem& problem,
                                 const ConvLayerBuffers& buffers) {
  ASSIGN_OR_RETURN(bound_pack_, MakeVariantPack(path_, problem, buffers));
  bound_buffers_ = buffers;
  return absl::OkStatus();
}

absl::Status ConvLayerPlan::RunBound(cudnnHandle_t handle, cudaStream_t stream,
                                     const ConvLayerProblem& problem) const {
  if (bound_pack_.get() == nullptr) return absl::InternalError("layer plan was never bound");
  return RunPlan(handle, stream, path_, plan_, bound_pack_, problem, bound_buffers_);
}

struct ConvLayerPlanner::Candidates {
  OperationGraph graph;
  std::vector<BackendDescriptor> configs;
  std::vector<EngineInfo> engines;
  // Why the last rejected candidate was rejected, for error messages.
  std::string last_rejection;
};

absl::StatusOr<ConvLayerPlanner::Candidates> ConvLayerPlanner::FindCandidates(
    const ConvLayerProblem& problem, bool fused) {
  Candidates candidates;
  ASSIGN_OR_RETURN(candidates.graph, BuildOperationGraph(handle_, problem, fused));
  std::vector<cudnnBackendHeurMode_t> modes;
  switch (selection_.search) {
    case EngineSearch::kHeuristicInstant:
      modes = {CUDNN_HEUR_MODE_INSTANT, CUDNN_HEUR_MODE_FALLBACK};
      break;
    case EngineSearch::kAutotune:
      // Both heuristic modes rank differently; timing decides among their tops.
      modes = {CUDNN_HEUR_MODE_INSTANT, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK};
      break;
    case EngineSearch::kHeuristicB:
      modes = {CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK};
      break;
    case EngineSearch::kFallback:
      modes = {CUDNN_HEUR_MODE_FALLBACK};
      break;
  }
  const bool float32 = problem.dtype == DType::kFloat32;
  for (cudnnBackendHeurMode_t mode : modes) {
    absl::StatusOr<std::vector<BackendDescriptor>> configs =
        QueryHeuristics(candidates.graph.graph, mode);
    if (!configs.ok()) {
      candidates.last_rejection = std::string(configs.status().message());
      continue;
    }
    for (BackendDescriptor& config : *configs) {
      absl::StatusOr<EngineInfo> info = DescribeEngine(config);
      if (!info.ok()) continue;
      const bool seen = std::any_of(candidates.engines.begin(), candidates.engines.end(),
                                    [&](const EngineInfo& e) { return e.index == info->index; });
      if (seen) continue;
      if (selection_.blocklist.contains(info->index)) {
        candidates.last_rejection = absl::StrCat("engine ", info->index, " is blocklisted");
        continue;
      }
      if (selection_.deterministic_only && HasNote(*info, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) {
        candidates.last_rejection = absl::StrCat("engine ", info->index, " is non-deterministic");
        continue;
      }
      if (float32 && selection_.strict_float32 &&
          (HasNote(*info, CUDNN_NUMERICAL_NOTE_TENSOR_CORE) ||
           HasNote(*info, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))) {
        candidates.last_rejection =
            absl::StrCat("engine ", info->index, " uses TF32 or down-converts (strict float32)");
        continue;
      }
      candidates.engines.push_back(*info);
      candidates.configs.push_back(std::move(config));
    }
  }
  return candidates;
}

absl::StatusOr<float> ConvLayerPlanner::TimePlan(const ConvLayerPlan& plan,
                                                 const ConvLayerProblem& problem,
                                                 const ConvLayerBuffers& buffers) {
  ASSIGN_OR_RETURN(DeviceBuffer workspace, DeviceBuffer::Create(plan.workspace_bytes()));
  ConvLayerBuffers timed = buffers;
  timed.workspace = workspace.data();
  ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create());
  ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create());
  ASSIGN_OR_RETURN(BackendDescriptor pack, MakeVariantPack(plan.path_, problem, timed));
  const auto run = [&] {
    return RunPlan(handle_, stream_, plan.path_, plan.plan_, pack, problem, timed);
  };
  RETURN_IF_ERROR(run());  // warm-up
  // Back-to-back runs per sample, so launch gaps do not swamp kernels of a
  // few microseconds; the median sample resists clock and cache noise.
  constexpr int kRunsPerSample = 8;
  std::vector<float> times;
  for (int i = 0; i < std::max(selection_.autotune_iterations, 1); ++i) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream_));
    for (int r = 0; r < kRunsPerSample; ++r) {
      RETURN_IF_ERROR(run());
    }
    CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream_));
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
    float ms = 0;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    times.push_back(ms / kRunsPerSample);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

absl::Status ConvLayerPlanner::FinalizePlan(const BackendDescriptor& config,
                                            ConvLayerPlan* plan) {
  ASSIGN_OR_RETURN(plan->plan_, BackendDescriptor::Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
  RETURN_IF_ERROR(plan->plan_.Set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_));
  RETURN_IF_ERROR(plan->plan_.SetDescriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config));
  RETURN_IF_ERROR(plan->plan_.Finalize());
  int64_t count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(plan->plan_.get(),
                                                 CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &count,
                                                 &plan->workspace_bytes_));
  if (plan->workspace_bytes_ > selection_.max_workspace_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("engine ", plan->engine_index_, " needs ",
                                                     plan->workspace_bytes_,
                                                     " workspace bytes, over the limit"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ConvLayerPlan> ConvLayerPlanner::BuildChosen(const ConvLayerProblem& problem,
                                                            LayerPath path,
                                                            int64_t engine_index) {
  ASSIGN_OR_RETURN(Candidates candidates,
                   FindCandidates(problem, path == LayerPath::kFused && problem.needs_epilogue()));
  for (size_t i = 0; i < candidates.configs.size(); ++i) {
    if (candidates.engines[i].index != engine_index) continue;
    ConvLayerPlan plan;
    plan.path_ = path;
    plan.engine_index_ = engine_index;
    RETURN_IF_ERROR(FinalizePlan(candidates.configs[i], &plan));
    plan.parts_ = std::move(candidates.graph.parts);
    plan.parts_.push_back(std::move(candidates.graph.graph));
    return plan;
  }
  return absl::NotFoundError(absl::StrCat("engine ", engine_index, " is not offered for ",
                                          problem.Describe()));
}

absl::StatusOr<ConvLayerPlan> ConvLayerPlanner::Build(const ConvLayerProblem& problem,
                                                      const ConvLayerBuffers& buffers) {
  const bool autotune = selection_.search == EngineSearch::kAutotune;
  const int max_timed = std::max(selection_.autotune_candidates, 1);
  std::string reasons;
  std::optional<ConvLayerPlan> best;
  // The fused graph first (a conv-only graph when there is nothing to fuse),
  // then the conv-only graph of the unfused path.
  const std::vector<LayerPath> paths = problem.needs_epilogue()
                                           ? std::vector<LayerPath>{LayerPath::kFused,
                                                                    LayerPath::kUnfused}
                                           : std::vector<LayerPath>{LayerPath::kFused};
  for (LayerPath path : paths) {
    if (best.has_value() && !autotune) break;
    const bool fused_graph = path == LayerPath::kFused && problem.needs_epilogue();
    absl::StatusOr<Candidates> candidates = FindCandidates(problem, fused_graph);
    if (!candidates.ok()) {
      absl::StrAppend(&reasons, " ", LayerPathName(path), ": ", candidates.status().message(), ";");
      continue;
    }
    int timed = 0;
    for (size_t i = 0; i < candidates->configs.size() && timed < max_timed; ++i) {
      ConvLayerPlan plan;
      plan.path_ = path;
      plan.engine_index_ = candidates->engines[i].index;
      absl::Status status = FinalizePlan(candidates->configs[i], &plan);
      if (!status.ok()) {
        candidates->last_rejection = std::string(status.message());
        continue;
      }
      if (!autotune) {
        plan.parts_ = std::move(candidates->graph.parts);
        plan.parts_.push_back(std::move(candidates->graph.graph));
        best = std::move(plan);
        break;
      }
      ++timed;
      absl::StatusOr<float> ms = TimePlan(plan, problem, buffers);
      if (!ms.ok()) {
        candidates->last_rejection = std::string(ms.status().message());
        continue;
      }
      plan.measured_ms_ = *ms;
      if (!best.has_value() || plan.measured_ms_ < best->measured_ms_) best = std::move(plan);
    }
    if (autotune && best.has_value() && best->path_ == path) {
      // Keep the graph the winning plan refers to.
      best->parts_ = std::move(candidates->graph.parts);
      best->parts_.push_back(std::move(candidates->graph.graph));
    }
    absl::StrAppend(&reasons, " ", LayerPathName(path), ": ", candidates->configs.size(),
                    " candidates",
                    candidates->last_rejection.empty()
                        ? ""
                        : absl::StrCat(", last rejected because ", candidates->last_rejection),
                    ";");
  }
  if (!best.has_value()) {
    return absl::UnimplementedError(absl::StrCat("no cuDNN engine runs layer ", problem.Describe(),
                                                 " under the selection policy:", reasons));
  }
  return std::move(*best);
}

}  // namespace convserve
