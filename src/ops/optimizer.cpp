#include "cnn/optimizer.hpp"

#include <cmath>

#include "cnn/errors.hpp"

namespace cnn {

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "momentum") return OptimizerKind::kMomentum;
  if (name == "adam") return OptimizerKind::kAdam;
  throw UsageError("--optimizer: unknown optimizer '" + name + "' (available: sgd, momentum, adam)");
}

const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kMomentum: return "momentum";
    case OptimizerKind::kAdam: return "adam";
  }
  return "?";
}

int optimizer_state_per_param(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return 0;
    case OptimizerKind::kMomentum: return 1;
    case OptimizerKind::kAdam: return 2;
  }
  return 0;
}

void sgd_update(float* params, const float* grads, std::int64_t n, float lr, float grad_scale) {
  const float step = lr * grad_scale;
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) params[i] -= step * grads[i];
}

void momentum_update(float* params, float* velocity, const float* grads, std::int64_t n, float lr, float momentum,
                     float grad_scale) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    velocity[i] = momentum * velocity[i] + grad_scale * grads[i];
    params[i] -= lr * velocity[i];
  }
}

void adam_update(float* params, float* m, float* v, const float* grads, std::int64_t n, float lr, float beta1,
                 float beta2, float eps, std::int64_t step, float grad_scale) {
  const double t = static_cast<double>(step);
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(static_cast<double>(beta1), t)));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), t)));
  const float one_minus_beta1 = 1.0f - beta1, one_minus_beta2 = 1.0f - beta2;
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grad_scale * grads[i];
    m[i] = beta1 * m[i] + one_minus_beta1 * g;
    v[i] = beta2 * v[i] + one_minus_beta2 * (g * g);
    params[i] -= step_size * m[i] / (std::sqrt(v[i]) / bias_correction2_sqrt + eps);
  }
}

void apply_optimizer(const OptimizerSettings& settings, float* params, float* state, const float* grads,
                     std::int64_t total, std::int64_t begin, std::int64_t count, float grad_scale) {
  float* p = params + begin;
  const float* g = grads + begin;
  switch (settings.kind) {
    case OptimizerKind::kSgd:
      sgd_update(p, g, count, settings.lr, grad_scale);
      break;
    case OptimizerKind::kMomentum:
      momentum_update(p, state + begin, g, count, settings.lr, settings.momentum, grad_scale);
      break;
    case OptimizerKind::kAdam:
      adam_update(p, state + begin, state + total + begin, g, count, settings.lr, settings.beta1, settings.beta2,
                  settings.eps, settings.step, grad_scale);
      break;
  }
}

}  // namespace cnn
