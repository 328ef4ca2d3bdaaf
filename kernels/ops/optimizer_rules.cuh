// One parameter's update, for each optimizer: the arithmetic of the CPU twins (src/ops/optimizer.cpp)
// written once for device code, so that the optimizer kernels (optimizer.cu) and the persistent
// seed kernel (seed_persistent.cu), which updates its parameters where it keeps them, give the
// same bits for the same gradient. `grad` is the gradient SUMMED over the global batch; grad_scale
// (1 / batch) makes it the mean.
#pragma once

#include "cnn/optimizer.hpp"

namespace cnn::cuda {

// p -= lr * (scale * g + W * p); W = 0 keeps the arithmetic of the builds before weight decay.
__device__ __forceinline__ float sgd_rule(float p, float grad, float lr, float weight_decay, float grad_scale) {
  if (weight_decay == 0.0f) return p - lr * grad_scale * grad;
  const float g = grad_scale * grad + weight_decay * p;
  return p - lr * g;
}

// g = scale * g + W * p ;  v = momentum * v + g ;  p -= lr * (nesterov ? g + momentum * v : v)
// (PyTorch's SGD with momentum, dampening 0); `velocity` is updated in place.
__device__ __forceinline__ float momentum_rule(float p, float& velocity, float grad, float lr, float momentum,
                                               float weight_decay, bool nesterov, float grad_scale) {
  float g = grad_scale * grad;
  if (weight_decay != 0.0f) g += weight_decay * p;
  const float v = momentum * velocity + g;
  velocity = v;
  return p - lr * (nesterov ? g + momentum * v : v);
}

// PyTorch's Adam and AdamW with the step's constants from the host (cnn::adam_step, as the CPU twin):
//   p *= decay_factor ; g = scale g + l2 p ; m = b1 m + (1-b1) g ;  v = b2 v + (1-b2) g^2 ;
//   p -= step_size * m / (sqrt(v) / bc2_sqrt + eps)
// m and v are updated in place.
__device__ __forceinline__ float adam_rule(float p, float& m, float& v, float grad, const AdamStep& c,
                                           float grad_scale) {
  if (c.decay_factor != 1.0f) p *= c.decay_factor;
  float g = grad_scale * grad;
  if (c.l2 != 0.0f) g += c.l2 * p;
  const float mi = c.beta1 * m + c.one_minus_beta1 * g;
  const float vi = c.beta2 * v + c.one_minus_beta2 * (g * g);
  m = mi;
  v = vi;
  return p - c.step_size * mi / (sqrtf(vi) / c.bias_correction2_sqrt + c.eps);
}

// One step's update rule for every parameter: the optimizer, its settings for this step (the
// scheduled lr, Adam's constants) and the gradient's scale.
struct UpdateRule {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.0f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  AdamStep adam;
  float grad_scale = 1.0f;
};

// The parameter after the update; `first` and `second` are its optimizer state (momentum: the
// velocity in `first`; adam: m, v), untouched by sgd.
__device__ __forceinline__ float apply_rule(const UpdateRule& r, float p, float grad, float& first, float& second) {
  switch (r.kind) {
    case OptimizerKind::kSgd:
      return sgd_rule(p, grad, r.lr, r.weight_decay, r.grad_scale);
    case OptimizerKind::kMomentum:
      return momentum_rule(p, first, grad, r.lr, r.momentum, r.weight_decay, r.nesterov, r.grad_scale);
    default:  // kAdam, kAdamW
      return adam_rule(p, first, second, grad, r.adam, r.grad_scale);
  }
}

}  // namespace cnn::cuda
