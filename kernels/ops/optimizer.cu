// Optimizer updates over the flat parameter buffer: the twins of src/ops/optimizer.cpp's sgd_update,
// momentum_update and adam_update. Elementwise, so no ordering question arises. Each kernel may be
// given the divergence check's device word (kernels/ops/nonfinite.cuh): when it is set, the step's
// gradient was not finite and the kernel returns at once, leaving parameters and state as they were.
#include <cmath>

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

// p -= lr * scale * g
__global__ void sgd_update_kernel(float* __restrict__ params /*[n]*/, const float* __restrict__ grads /*[n]*/,
                                  std::int64_t n, float lr, float grad_scale, const unsigned long long* skip_flag) {
  start_after_previous_kernel();
  if (update_skipped(skip_flag)) return;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    params[i] -= lr * grad_scale * grads[i];
}

// v = momentum * v + scale * g ;  p -= lr * v   (PyTorch's SGD with momentum, dampening 0)
__global__ void momentum_update_kernel(float* __restrict__ params /*[n]*/, float* __restrict__ velocity /*[n]*/,
                                       const float* __restrict__ grads /*[n]*/, std::int64_t n, float lr,
                                       float momentum, float grad_scale, const unsigned long long* skip_flag) {
  start_after_previous_kernel();
  if (update_skipped(skip_flag)) return;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = momentum * velocity[i] + grad_scale * grads[i];
    velocity[i] = v;
    params[i] -= lr * v;
  }
}

// PyTorch's Adam with the bias corrections precomputed on the host (as the CPU twin does):
//   m = b1 m + (1-b1) g ;  v = b2 v + (1-b2) g^2 ;  p -= step_size * m / (sqrt(v) / bc2_sqrt + eps)
__global__ void adam_update_kernel(float* __restrict__ params, float* __restrict__ m, float* __restrict__ v,
                                   const float* __restrict__ grads, std::int64_t n, float beta1, float beta2,
                                   float one_minus_beta1, float one_minus_beta2, float eps, float step_size,
                                   float bias_correction2_sqrt, float grad_scale,
                                   const unsigned long long* skip_flag) {
  start_after_previous_kernel();
  if (update_skipped(skip_flag)) return;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad_scale * grads[i];
    const float mi = beta1 * m[i] + one_minus_beta1 * g;
    const float vi = beta2 * v[i] + one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] -= step_size * mi / (sqrtf(vi) / bias_correction2_sqrt + eps);
  }
}

}  // namespace

void adam_update(float* params, float* m, float* v, const float* grads, std::int64_t n, float lr, float beta1,
                 float beta2, float eps, std::int64_t step, float grad_scale, cudaStream_t stream,
                 const unsigned long long* skip_flag) {
  if (n <= 0) return;
  // The same double-precision constants, rounded once, as src/ops/optimizer.cpp.
  const double t = static_cast<double>(step);
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(static_cast<double>(beta1), t)));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), t)));
  launch_dependent(adam_update_kernel, grid_for(n), kBlockThreads, 0, stream, params, m, v, grads, n, beta1, beta2,
                   1.0f - beta1, 1.0f - beta2, eps, step_size, bias_correction2_sqrt, grad_scale, skip_flag);
  CNN_CHECK_LAUNCH();
}

void sgd_update(float* params, const float* grads, std::int64_t n, float lr, float grad_scale, cudaStream_t stream,
                const unsigned long long* skip_flag) {
  if (n <= 0) return;
  launch_dependent(sgd_update_kernel, grid_for(n), kBlockThreads, 0, stream, params, grads, n, lr, grad_scale,
                   skip_flag);
  CNN_CHECK_LAUNCH();
}

void momentum_update(float* params, float* velocity, const float* grads, std::int64_t n, float lr, float momentum,
                     float grad_scale, cudaStream_t stream, const unsigned long long* skip_flag) {
  if (n <= 0) return;
  launch_dependent(momentum_update_kernel, grid_for(n), kBlockThreads, 0, stream, params, velocity, grads, n, lr,
                   momentum, grad_scale, skip_flag);
  CNN_CHECK_LAUNCH();
}

void apply_optimizer(const OptimizerSettings& settings, float* params, float* state, const float* grads,
                     std::int64_t total, float grad_scale, cudaStream_t stream, const unsigned long long* skip_flag) {
  switch (settings.kind) {
    case OptimizerKind::kSgd:
      sgd_update(params, grads, total, settings.lr, grad_scale, stream, skip_flag);
      break;
    case OptimizerKind::kMomentum:
      momentum_update(params, state, grads, total, settings.lr, settings.momentum, grad_scale, stream, skip_flag);
      break;
    case OptimizerKind::kAdam:  // m, then v: two whole copies of the layout
      adam_update(params, state, state + total, grads, total, settings.lr, settings.beta1, settings.beta2,
                  settings.eps, settings.step, grad_scale, stream, skip_flag);
      break;
  }
}

}  // namespace cnn::cuda
