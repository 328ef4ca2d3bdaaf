// ReLU as a plain loop (the twin of kernels/ops/relu.cu).
#include "cnn/layer_ops.hpp"

#include <cstdint>

namespace cnn {

void relu_forward(float* out, const float* in, std::int64_t count) {
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void relu_backward(float* grad_in, const float* grad_out, const float* out, std::int64_t count) {
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) grad_in[i] = out[i] > 0.0f ? grad_out[i] : 0.0f;
}

}  // namespace cnn
