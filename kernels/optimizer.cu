// Optimizer updates over the flat parameter buffer: the twins of src/optimizer.cpp's sgd_update and
// momentum_update. Elementwise, so no ordering question arises.
#include "cuda_check.hpp"
#include "cuda_ops.hpp"
#include "launch.hpp"

namespace cnn::cuda {
namespace {

// p -= lr * scale * g
__global__ void sgd_update_kernel(float* __restrict__ params /*[n]*/, const float* __restrict__ grads /*[n]*/,
                                  std::int64_t n, float lr, float grad_scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    params[i] -= lr * grad_scale * grads[i];
}

// v = momentum * v + scale * g ;  p -= lr * v   (PyTorch's SGD with momentum, dampening 0)
__global__ void momentum_update_kernel(float* __restrict__ params /*[n]*/, float* __restrict__ velocity /*[n]*/,
                                       const float* __restrict__ grads /*[n]*/, std::int64_t n, float lr,
                                       float momentum, float grad_scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = momentum * velocity[i] + grad_scale * grads[i];
    velocity[i] = v;
    params[i] -= lr * v;
  }
}

}  // namespace

void sgd_update(float* params, const float* grads, std::int64_t n, float lr, float grad_scale, cudaStream_t stream) {
  if (n <= 0) return;
  sgd_update_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(params, grads, n, lr, grad_scale);
  CNN_CHECK_LAUNCH();
}

void momentum_update(float* params, float* velocity, const float* grads, std::int64_t n, float lr, float momentum,
                     float grad_scale, cudaStream_t stream) {
  if (n <= 0) return;
  momentum_update_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(params, velocity, grads, n, lr, momentum,
                                                                    grad_scale);
  CNN_CHECK_LAUNCH();
}

}  // namespace cnn::cuda
