// Optimizer updates over the flat parameter buffer: the twins of src/ops/optimizer.cpp's sgd_update,
// momentum_update and adam_update. Elementwise, so no ordering question arises. Each kernel may be
// given the divergence check's device word (kernels/ops/nonfinite.cuh): when it is set, the step's
// gradient was not finite and the kernel returns at once, leaving parameters and state as they were.
#include "cuda/cuda_check.hpp"
#include "ops/cuda_ops.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "ops/nonfinite.cuh"

namespace cnn::cuda {
namespace {

__device__ bool update_skipped(const unsigned long long* skip_flag) {
  return skip_flag != nullptr && *skip_flag != kAllFinite;
}

// p -= lr * (scale * g + W * p); W = 0 keeps the arithmetic of the builds before weight decay.
__global__ void sgd_update_kernel(float* __restrict__ params /*[n]*/, const float* __restrict__ grads /*[n]*/,
                                  std::int64_t n, float lr, float weight_decay, float grad_scale,
                                  const unsigned long long* skip_flag) {
  start_after_previous_kernel();
  if (update_skipped(skip_flag)) return;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (weight_decay == 0.0f) {
      params[i] -= lr * grad_scale * grads[i];
    } else {
      const float g = grad_scale * grads[i] + weight_decay * params[i];
      params[i] -= lr * g;
    }
  }
}

// g = scale * g + W * p ;  v = momentum * v + g ;  p -= lr * (nesterov ? g + momentum * v : v)
// (PyTorch's SGD with momentum, dampening 0)
__global__ void momentum_update_kernel(float* __restrict__ params /*[n]*/, float* __restrict__ velocity /*[n]*/,
                                       const float* __restrict__ grads /*[n]*/, std::int64_t n, float lr,
                                       float momentum, float weight_decay, bool nesterov, float grad_scale,
                                       const unsigned long long* skip_flag) {
  start_after_previous_kernel();
  if (update_skipped(skip_flag)) return;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float g = grad_scale * grads[i];
    if (weight_decay != 0.0f) g += weight_decay * params[i];
    const float v = momentum * velocity[i] + g;
    velocity[i] = v;
    params[i] -= lr * (nesterov ? g + momentum * v : v);
  }
}

// PyTorch's Adam and AdamW with the step's constants from the host (cnn::adam_step, as the CPU twin):
//   p *= decay_factor ; g = scale g + l2 p ; m = b1 m + (1-b1) g ;  v = b2 v + (1-b2) g^2 ;
//   p -= step_size * m / (sqrt(v) / bc2_sqrt + eps)
__global__ void adam_update_kernel(float* __restrict__ params, float* __restrict__ m, float* __restrict__ v,
                                   const float* __restrict__ grads, std::int64_t n, AdamStep c, float grad_scale,
                                   const unsigned long long* skip_flag) {
  start_after_previous_kernel();
  if (update_skipped(skip_flag)) return;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float p = params[i];
    if (c.decay_factor != 1.0f) p *= c.decay_factor;
    float g = grad_scale * grads[i];
    if (c.l2 != 0.0f) g += c.l2 * p;
    const float mi = c.beta1 * m[i] + c.one_minus_beta1 * g;
    const float vi = c.beta2 * v[i] + c.one_minus_beta2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    params[i] = p - c.step_size * mi / (sqrtf(vi) / c.bias_correction2_sqrt + c.eps);
  }
}

}  // namespace

void adam_update(float* params, float* m, float* v, const float* grads, std::int64_t n, const AdamStep& c,
                 float grad_scale, cudaStream_t stream, const unsigned long long* skip_flag) {
  if (n <= 0) return;
  launch_dependent(adam_update_kernel, grid_for(n), kBlockThreads, 0, stream, params, m, v, grads, n, c, grad_scale,
                   skip_flag);
  CNN_CHECK_LAUNCH();
}

void sgd_update(float* params, const float* grads, std::int64_t n, float lr, float weight_decay, float grad_scale,
                cudaStream_t stream, const unsigned long long* skip_flag) {
  if (n <= 0) return;
  launch_dependent(sgd_update_kernel, grid_for(n), kBlockThreads, 0, stream, params, grads, n, lr, weight_decay,
                   grad_scale, skip_flag);
  CNN_CHECK_LAUNCH();
}

void momentum_update(float* params, float* velocity, const float* grads, std::int64_t n, float lr, float momentum,
                     float weight_decay, bool nesterov, float grad_scale, cudaStream_t stream,
                     const unsigned long long* skip_flag) {
  if (n <= 0) return;
  launch_dependent(momentum_update_kernel, grid_for(n), kBlockThreads, 0, stream, params, velocity, grads, n, lr,
                   momentum, weight_decay, nesterov, grad_scale, skip_flag);
  CNN_CHECK_LAUNCH();
}

// The update is queued eagerly after each step's graph, never captured (device_backend.cu): the
// scheduled lr and Adam's step constants are plain kernel arguments, new at every step.
void apply_optimizer(const OptimizerSettings& settings, float* params, float* state, const float* grads,
                     std::int64_t total, float grad_scale, cudaStream_t stream, const unsigned long long* skip_flag) {
  switch (settings.kind) {
    case OptimizerKind::kSgd:
      sgd_update(params, grads, total, settings.lr, settings.weight_decay, grad_scale, stream, skip_flag);
      break;
    case OptimizerKind::kMomentum:
      momentum_update(params, state, grads, total, settings.lr, settings.momentum, settings.weight_decay,
                      settings.nesterov, grad_scale, stream, skip_flag);
      break;
    case OptimizerKind::kAdam:  // m, then v: two whole copies of the layout
    case OptimizerKind::kAdamW:
      adam_update(params, state, state + total, grads, total, adam_step(settings), grad_scale, stream, skip_flag);
      break;
  }
}

}  // namespace cnn::cuda
