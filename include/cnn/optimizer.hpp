// Optimizer updates over the flat parameter buffer. The gradient buffer holds the SUM over the global
// batch; grad_scale = 1/global_batch turns it into the mean inside the same pass.
// CUDA twins in kernels/ops/optimizer.cu (namespace cnn::cuda), same names and argument order.
#pragma once

#include <cstdint>
#include <string>

namespace cnn {

enum class OptimizerKind { kSgd, kMomentum, kAdam, kAdamW };

struct OptimizerSettings {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.1f;            // this step's lr (the schedule's value, lr_schedule.hpp), set before each update
  float momentum = 0.9f;
  double beta1 = 0.9;         // adam, adamw: the user's values; adam_step rounds what it derives from them once
  double beta2 = 0.999;
  double eps = 1e-8;
  std::int64_t step = 1;      // adam, adamw: 1-based index of the update being applied (bias correction)
  float weight_decay = 0.0f;  // --weight-decay W: L2 (sgd, momentum, adam) or decoupled (adamw)
  bool nesterov = false;      // momentum only
};

OptimizerKind parse_optimizer(const std::string& name);  // throws UsageError
const char* optimizer_name(OptimizerKind kind);
// Floats of optimizer state per parameter (0 for SGD, 1 for momentum, 2 for adam and adamw: m then v,
// each a whole copy of the layout, as the checkpoint stores them).
int optimizer_state_per_param(OptimizerKind kind);

// Every update below works on the mean gradient g = grad_scale * grads (grads: the SUM over the global
// batch) and, with weight decay W, adds L2 decay to it as PyTorch does: g = g + W * p, on every
// parameter, after the allreduce and the 1/B scaling. sgd and momentum with W = 0 (and no Nesterov)
// run the very arithmetic of the builds before weight decay existed, so their runs keep their bits;
// Adam's constants changed (adam_step), and with them the last bits of Adam runs.

// torch.optim.SGD(lr, weight_decay=W):  g = scale * grads + W * p ;  p -= lr * g
void sgd_update(float* params, const float* grads, std::int64_t n, float lr, float weight_decay, float grad_scale);
// torch.optim.SGD(lr, momentum, dampening=0, weight_decay=W, nesterov):
//   g = scale * grads + W * p ;  v = momentum * v + g ;  p -= lr * (nesterov ? g + momentum * v : v)
void momentum_update(float* params, float* velocity, const float* grads, std::int64_t n, float lr, float momentum,
                     float weight_decay, bool nesterov, float grad_scale);

// One Adam step's float constants, computed on the host from the settings in double and rounded to
// float once, so that the CPU and CUDA twins use the same bits:
//   one_minus_beta1/2 = 1 - beta (PyTorch passes 1 - beta2 from Python's double to addcmul_, so the
//     stored v then matches its exp_avg_sq to float rounding; 1.0f - 0.999f would be 1.29e-5 smaller)
//   step_size = lr / (1 - beta1^t),  bias_correction2_sqrt = sqrt(1 - beta2^t)  (t = settings.step)
//   decay_factor = 1 - lr * W for adamw (decoupled decay), 1 otherwise; l2 = W for adam, 0 otherwise
struct AdamStep {
  float beta1 = 0.9f, beta2 = 0.999f;
  float one_minus_beta1 = 0.1f, one_minus_beta2 = 0.001f;
  float eps = 1e-8f;
  float step_size = 0.0f;
  float bias_correction2_sqrt = 1.0f;
  float l2 = 0.0f;
  float decay_factor = 1.0f;
};
AdamStep adam_step(const OptimizerSettings& settings);

// PyTorch's Adam (amsgrad off) and AdamW, with c = adam_step(settings):
//   adamw: p *= c.decay_factor                     (torch.optim.AdamW: p.mul_(1 - lr * W) first)
//   g = scale * grads + c.l2 * p                   (torch.optim.Adam's weight_decay)
//   m = beta1 * m + (1 - beta1) * g ;  v = beta2 * v + (1 - beta2) * g^2
//   p -= c.step_size * m / (sqrt(v) / c.bias_correction2_sqrt + eps)
void adam_update(float* params, float* m, float* v, const float* grads, std::int64_t n, const AdamStep& c,
                 float grad_scale);

// The CPU backends' update of elements [begin, begin + count) of a flat buffer of `total` floats, by
// settings.kind. `state` holds optimizer_state_per_param(kind) whole copies of the buffer, one after
// another (adam: m then v). Elements are independent, so any split over threads gives the same bits.
void apply_optimizer(const OptimizerSettings& settings, float* params, float* state, const float* grads,
                     std::int64_t total, std::int64_t begin, std::int64_t count, float grad_scale);

}  // namespace cnn
