// Optimizer updates over the flat parameter buffer. The gradient buffer holds the SUM over the global
// batch; grad_scale = 1/global_batch turns it into the mean inside the same pass.
// CUDA twins in kernels/optimizer.cu (namespace cnn::cuda), same names and argument order.
#pragma once

#include <cstdint>
#include <string>

namespace cnn {

enum class OptimizerKind { kSgd, kMomentum };

struct OptimizerSettings {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.1f;
  float momentum = 0.9f;
};

OptimizerKind parse_optimizer(const std::string& name);  // throws UsageError
const char* optimizer_name(OptimizerKind kind);
// Floats of optimizer state per parameter (0 for SGD, 1 for momentum).
int optimizer_state_per_param(OptimizerKind kind);

// p -= lr * scale * g
void sgd_update(float* params, const float* grads, std::int64_t n, float lr, float grad_scale);
// v = momentum * v + scale * g ;  p -= lr * v          (PyTorch's SGD with momentum, dampening 0)
void momentum_update(float* params, float* velocity, const float* grads, std::int64_t n, float lr,
                     float momentum, float grad_scale);

}  // namespace cnn
