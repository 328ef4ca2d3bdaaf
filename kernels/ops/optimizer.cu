// Optimizer updates over the flat parameter buffer: the twins of src/ops/optimizer.cpp's sgd_update,
// momentum_update and adam_update. Elementwise, so no ordering question arises. Each kernel may be
// given the divergence check's device word (kernels/ops/nonfinite.cuh): when it is set, the step's
// gradient was not finite and the kernel returns at once, leaving parameters and state as they were.
#include "cuda/cuda_check.hpp"
#include "ops/cuda_ops.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "ops/nonfinite.cuh"
#include "ops/optimizer_rules.cuh"

namespace cnn::cuda {
namespace {

__device__ bool update_skipped(const unsigned long long* skip_flag) {
  return skip_flag != nullptr && *skip_flag != kAllFinite;
}

// The arithmetic per element is optimizer_rules.cuh's, shared with the persistent seed kernel.
__global__ void sgd_update_kernel(float* __restrict__ params /*[n]*/, const float* __restrict__ grads /*[n]*/,
                                  std::int64_t n, float lr, float weight_decay, float grad_scale,
                                  const unsigned long long* skip_flag) {
  start_after_previous_kernel();
  if (update_skipped(skip_flag)) return;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    params[i] = sgd_rule(params[i], grads[i], lr, weight_decay, grad_scale);
}

__global__ void momentum_update_kernel(float* __restrict__ params /*[n]*/, float* __restrict__ velocity /*[n]*/,
                                       const float* __restrict__ grads /*[n]*/, std::int64_t n, float lr,
                                       float momentum, float weight_decay, bool nesterov, float grad_scale,
                                       const unsigned long long* skip_flag) {
  start_after_previous_kernel();
  if (update_skipped(skip_flag)) return;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float v = velocity[i];
    params[i] = momentum_rule(params[i], v, grads[i], lr, momentum, weight_decay, nesterov, grad_scale);
    velocity[i] = v;
  }
}

__global__ void adam_update_kernel(float* __restrict__ params, float* __restrict__ m, float* __restrict__ v,
                                   const float* __restrict__ grads, std::int64_t n, AdamStep c, float grad_scale,
                                   const unsigned long long* skip_flag) {
  start_after_previous_kernel();
  if (update_skipped(skip_flag)) return;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float mi = m[i], vi = v[i];
    params[i] = adam_rule(params[i], mi, vi, grads[i], c, grad_scale);
    m[i] = mi;
    v[i] = vi;
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
