#include "cnn/optimizer.hpp"

#include "cnn/errors.hpp"

namespace cnn {

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "momentum") return OptimizerKind::kMomentum;
  throw UsageError("--optimizer: unknown optimizer '" + name + "' (available: sgd, momentum)");
}

const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kMomentum: return "momentum";
  }
  return "?";
}

int optimizer_state_per_param(OptimizerKind kind) { return kind == OptimizerKind::kMomentum ? 1 : 0; }

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

}  // namespace cnn
