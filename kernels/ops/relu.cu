// The ReLU twins of src/ (relu_forward, relu_backward): elementwise grid-stride kernels. The layer
// backend mostly folds its ReLUs into the neighbouring product's store or mask (layer_ops.hpp).
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {
namespace {

__global__ void relu_forward_kernel(float* out, const float* in, std::int64_t count) {
  start_after_previous_kernel();
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[e] = fmaxf(in[e], 0.0f);
}

__global__ void relu_backward_kernel(float* grad_in, const float* grad_out, const float* out, std::int64_t count) {
  start_after_previous_kernel();
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    grad_in[e] = out[e] > 0.0f ? grad_out[e] : 0.0f;
}

}  // namespace

void relu_forward(float* out, const float* in, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  launch_dependent(relu_forward_kernel, grid_for(count), kBlockThreads, 0, stream, out, in, count);
  CNN_CHECK_LAUNCH();
}

void relu_backward(float* grad_in, const float* grad_out, const float* out, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  launch_dependent(relu_backward_kernel, grid_for(count), kBlockThreads, 0, stream, grad_in, grad_out, out, count);
  CNN_CHECK_LAUNCH();
}

}  // namespace cnn::cuda
