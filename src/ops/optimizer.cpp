#include "cnn/optimizer.hpp"

#include <cmath>

#include "cnn/errors.hpp"

namespace cnn {

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "momentum") return OptimizerKind::kMomentum;
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "adamw") return OptimizerKind::kAdamW;
  throw UsageError("--optimizer: unknown optimizer '" + name + "' (available: sgd, momentum, adam, adamw)");
}

const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kMomentum: return "momentum";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
  }
  return "?";
}

int optimizer_state_per_param(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return 0;
    case OptimizerKind::kMomentum: return 1;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: return 2;
  }
  return 0;
}

void sgd_update(float* params, const float* grads, std::int64_t n, float lr, float weight_decay, float grad_scale) {
  if (weight_decay == 0.0f) {  // the arithmetic of the builds before weight decay: their bits
    const float step = lr * grad_scale;
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) params[i] -= step * grads[i];
    return;
  }
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grad_scale * grads[i] + weight_decay * params[i];
    params[i] -= lr * g;
  }
}

void momentum_update(float* params, float* velocity, const float* grads, std::int64_t n, float lr, float momentum,
                     float weight_decay, bool nesterov, float grad_scale) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    float g = grad_scale * grads[i];
    if (weight_decay != 0.0f) g += weight_decay * params[i];
    const float v = momentum * velocity[i] + g;
    velocity[i] = v;
    params[i] -= lr * (nesterov ? g + momentum * v : v);
  }
}

AdamStep adam_step(const OptimizerSettings& settings) {
  const double t = static_cast<double>(settings.step);
  const double lr = settings.lr;
  AdamStep c;
  c.beta1 = static_cast<float>(settings.beta1);
  c.beta2 = static_cast<float>(settings.beta2);
  c.one_minus_beta1 = static_cast<float>(1.0 - settings.beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - settings.beta2);
  c.eps = static_cast<float>(settings.eps);
  c.step_size = static_cast<float>(lr / (1.0 - std::pow(settings.beta1, t)));
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(settings.beta2, t)));
  if (settings.kind == OptimizerKind::kAdamW)
    c.decay_factor = static_cast<float>(1.0 - lr * static_cast<double>(settings.weight_decay));
  else
    c.l2 = settings.weight_decay;
  return c;
}

void adam_update(float* params, float* m, float* v, const float* grads, std::int64_t n, const AdamStep& c,
                 float grad_scale) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    float p = params[i];
    if (c.decay_factor != 1.0f) p *= c.decay_factor;
    float g = grad_scale * grads[i];
    if (c.l2 != 0.0f) g += c.l2 * p;
    m[i] = c.beta1 * m[i] + c.one_minus_beta1 * g;
    v[i] = c.beta2 * v[i] + c.one_minus_beta2 * (g * g);
    params[i] = p - c.step_size * m[i] / (std::sqrt(v[i]) / c.bias_correction2_sqrt + c.eps);
  }
}

void apply_optimizer(const OptimizerSettings& settings, float* params, float* state, const float* grads,
                     std::int64_t total, std::int64_t begin, std::int64_t count, float grad_scale) {
  float* p = params + begin;
  const float* g = grads + begin;
  switch (settings.kind) {
    case OptimizerKind::kSgd:
      sgd_update(p, g, count, settings.lr, settings.weight_decay, grad_scale);
      break;
    case OptimizerKind::kMomentum:
      momentum_update(p, state + begin, g, count, settings.lr, settings.momentum, settings.weight_decay,
                      settings.nesterov, grad_scale);
      break;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      adam_update(p, state + begin, state + total + begin, g, count, adam_step(settings), grad_scale);
      break;
  }
}

}  // namespace cnn
