#include "engine/cudnn/conv_operation_graph.h"

#include <limits>
#include <utility>

#include "engine/status_macros.h"

namespace convserve {
namespace {

// Virtual intermediates of the fused graph.
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

}  // namespace

bool UsesFloatScratch(const ConvLayerProblem& problem, LayerPath path) {
  return path == LayerPath::kUnfused && problem.dtype != DType::kFloat32 &&
         problem.needs_epilogue();
}

absl::StatusOr<std::shared_ptr<const ConvOperationGraph>> BuildConvOperationGraph(
    cudnnHandle_t handle, const ConvLayerProblem& p, LayerPath path) {
  auto og = std::make_shared<ConvOperationGraph>();
  const cudnnDataType_t io = CudnnType(p.dtype);
  const bool fused = path == LayerPath::kFused;
  const bool bias = fused && p.has_bias;
  const bool act = fused && p.activation.kind != ActivationKind::kIdentity;
  ASSIGN_OR_RETURN(BackendDescriptor x, MakeTensor(kUidX, io, p.input, p.channels_last, false));
  ASSIGN_OR_RETURN(BackendDescriptor w, MakeTensor(kUidW, io, p.weights, p.channels_last, false));
  const bool conv_is_last = !bias && !act;
  // The conv's output: virtual float when fused ops follow; else Y itself,
  // float32 when the unfused epilogue should round only once.
  const cudnnDataType_t conv_out_type =
      !conv_is_last || UsesFloatScratch(p, path) ? CUDNN_DATA_FLOAT : io;
  if (conv_is_last) og->y_type = conv_out_type;
  ASSIGN_OR_RETURN(BackendDescriptor conv_out,
                   MakeTensor(conv_is_last ? kUidY : kUidConvOut, conv_out_type, p.output,
                              p.channels_last, !conv_is_last));
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
    if (!act) og->y_type = io;
    ASSIGN_OR_RETURN(BackendDescriptor sum,
                     MakeTensor(act ? kUidBiasOut : kUidY, act ? CUDNN_DATA_FLOAT : io, p.output,
                                p.channels_last, act));
    ASSIGN_OR_RETURN(BackendDescriptor add, MakePointwise(CUDNN_POINTWISE_ADD, p.activation));
    ASSIGN_OR_RETURN(BackendDescriptor add_op, MakePointwiseOp(add, *last, &b, sum));
    ops.push_back(add_op.get());
    og->parts.push_back(std::move(b));
    og->parts.push_back(std::move(add));
    og->parts.push_back(std::move(add_op));
    og->parts.push_back(std::move(sum));
    last = &og->parts.back();
  }
  if (act) {
    og->y_type = io;
    ASSIGN_OR_RETURN(BackendDescriptor y, MakeTensor(kUidY, io, p.output, p.channels_last, false));
    ASSIGN_OR_RETURN(BackendDescriptor pw, MakePointwise(ActivationMode(p.activation.kind), p.activation));
    ASSIGN_OR_RETURN(BackendDescriptor act_op, MakePointwiseOp(pw, *last, nullptr, y));
    ops.push_back(act_op.get());
    og->parts.push_back(std::move(y));
    og->parts.push_back(std::move(pw));
    og->parts.push_back(std::move(act_op));
  }

  ASSIGN_OR_RETURN(og->graph, BackendDescriptor::Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  RETURN_IF_ERROR(og->graph.Set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
  RETURN_IF_ERROR(og->graph.SetDescriptors(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops));
  RETURN_IF_ERROR(og->graph.Finalize());
  og->parts.push_back(std::move(x));
  og->parts.push_back(std::move(w));
  og->parts.push_back(std::move(conv_out));
  og->parts.push_back(std::move(conv));
  og->parts.push_back(std::move(conv_op));
  return std::shared_ptr<const ConvOperationGraph>(std::move(og));
}

}  // namespace convserve
