// Optimizer updates over the flat parameter buffer. The gradient buffer holds the SUM over the global
// batch; grad_scale = 1/global_batch turns it into the mean inside the same pass.
// CUDA twins in kernels/ops/optimizer.cu (namespace cnn::cuda), same names and argument order.
#pragma once

#include <cstdint>
#include <string>

namespace cnn {

enum class OptimizerKind { kSgd, kMomentum, kAdam };

struct OptimizerSettings {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.1f;
  float momentum = 0.9f;
  float beta1 = 0.9f;         // adam
  float beta2 = 0.999f;       // adam
  float eps = 1e-8f;          // adam
  std::int64_t step = 1;      // adam: 1-based index of the update being applied (bias correction)
};

OptimizerKind parse_optimizer(const std::string& name);  // throws UsageError
const char* optimizer_name(OptimizerKind kind);
// Floats of optimizer state per parameter (0 for SGD, 1 for momentum, 2 for adam: m then v, each a
// whole copy of the layout, as the checkpoint stores them).
int optimizer_state_per_param(OptimizerKind kind);

// p -= lr * scale * g
void sgd_update(float* params, const float* grads, std::int64_t n, float lr, float grad_scale);
// v = momentum * v + scale * g ;  p -= lr * v          (PyTorch's SGD with momentum, dampening 0)
void momentum_update(float* params, float* velocity, const float* grads, std::int64_t n, float lr,
                     float momentum, float grad_scale);
// PyTorch's Adam (no weight decay, no amsgrad), g = scale * grads, t = step (1-based):
//   m = beta1 * m + (1 - beta1) * g ;  v = beta2 * v + (1 - beta2) * g^2
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The two bias corrections are computed in double from `step` and rounded to float once, so the
// CPU and CUDA twins use the same float constants.
void adam_update(float* params, float* m, float* v, const float* grads, std::int64_t n, float lr, float beta1,
                 float beta2, float eps, std::int64_t step, float grad_scale);

// The CPU backends' update of elements [begin, begin + count) of a flat buffer of `total` floats, by
// settings.kind. `state` holds optimizer_state_per_param(kind) whole copies of the buffer, one after
// another (adam: m then v). Elements are independent, so any split over threads gives the same bits.
void apply_optimizer(const OptimizerSettings& settings, float* params, float* state, const float* grads,
                     std::int64_t total, std::int64_t begin, std::int64_t count, float grad_scale);

}  // namespace cnn
