// Activation functions of a conv layer, evaluated in float. Header-only and
// host/device-callable so the CPU reference and the CUDA bias+activation
// kernel compute the same formulas.
#ifndef CONVSERVE_ENGINE_ACTIVATION_H_
#define CONVSERVE_ENGINE_ACTIVATION_H_

#include <cmath>

#include "engine/host_device.h"

namespace convserve {

enum class ActivationKind {
  kIdentity,
  kRelu,
  kTanh,
  kSigmoid,
  kElu,
  kGelu,
  kGeluTanh,
  kSoftplus,
  kSwish,
};

const char* ActivationName(ActivationKind kind);

struct Activation {
  // Which function.
  ActivationKind kind = ActivationKind::kIdentity;
  // kRelu: clip outputs above this value when has_upper_clip.
  bool has_upper_clip = false;
  float upper_clip = 0.0f;
  // kRelu: slope for negative inputs (0 = plain ReLU).
  float negative_slope = 0.0f;
  // kElu: alpha.
  float alpha = 1.0f;
  // kSoftplus, kSwish: beta.
  float beta = 1.0f;
};

CONVSERVE_HOST_DEVICE inline float ApplyActivation(const Activation& a, float x) {
  switch (a.kind) {
    case ActivationKind::kIdentity:
      return x;
    case ActivationKind::kRelu: {
      // +0, not -0, for negative inputs of a plain ReLU, as GPU kernels give.
      float y = x > 0.0f ? x : (a.negative_slope == 0.0f ? 0.0f : a.negative_slope * x);
      if (a.has_upper_clip && y > a.upper_clip) y = a.upper_clip;
      return y;
    }
    case ActivationKind::kTanh:
      return tanhf(x);
    case ActivationKind::kSigmoid:
      return 1.0f / (1.0f + expf(-x));
    case ActivationKind::kElu:
      return x > 0.0f ? x : a.alpha * expm1f(x);
    case ActivationKind::kGelu:
      return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case ActivationKind::kGeluTanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + tanhf(inner));
    }
    case ActivationKind::kSoftplus: {
      // log1p(exp(bx))/b, written so large bx neither overflows nor loses x.
      const float bx = a.beta * x;
      return (bx > 20.0f ? bx : log1pf(expf(bx))) / a.beta;
    }
    case ActivationKind::kSwish:
      return x / (1.0f + expf(-a.beta * x));
  }
  return x;
}

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_ACTIVATION_H_
