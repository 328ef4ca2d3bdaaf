// Fully connected layer on the CPU. The feature dimension is long (169*d) and the output short (10),
// so every loop runs along the features, vectorised with OpenMP SIMD reductions.
#include <algorithm>

#include "cnn/ops.hpp"

namespace cnn {

namespace {
// Features per block in the weight-gradient update: a block of every weight row stays in L1/L2
// while all samples of the batch are added into it.
constexpr std::int64_t kFeatureBlock = 1024;
}  // namespace

void fc_forward(float* out, const float* in, const float* weight, const float* bias, std::int64_t n,
                std::int64_t in_features, std::int64_t out_features) {
  for (std::int64_t s = 0; s < n; ++s) {
    const float* x = in + s * in_features;
    for (std::int64_t o = 0; o < out_features; ++o) {
      const float* w = weight + o * in_features;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (std::int64_t i = 0; i < in_features; ++i) sum += w[i] * x[i];
      out[s * out_features + o] = bias[o] + sum;
    }
  }
}

void fc_backward(float* grad_in, float* grad_weight, float* grad_bias, const float* grad_out, const float* in,
                 const float* weight, std::int64_t n, std::int64_t in_features, std::int64_t out_features) {
  if (grad_in != nullptr) {
    for (std::int64_t s = 0; s < n; ++s) {
      float* gx = grad_in + s * in_features;
      const float* g = grad_out + s * out_features;
      std::fill(gx, gx + in_features, 0.0f);
      for (std::int64_t o = 0; o < out_features; ++o) {
        const float* w = weight + o * in_features;
        const float go = g[o];
#pragma omp simd
        for (std::int64_t i = 0; i < in_features; ++i) gx[i] += go * w[i];
      }
    }
  }
  for (std::int64_t o = 0; o < out_features; ++o) {
    float bias_sum = 0.0f;
    for (std::int64_t s = 0; s < n; ++s) bias_sum += grad_out[s * out_features + o];
    grad_bias[o] += bias_sum;
  }
  for (std::int64_t begin = 0; begin < in_features; begin += kFeatureBlock) {
    const std::int64_t end = std::min(in_features, begin + kFeatureBlock);
    for (std::int64_t o = 0; o < out_features; ++o) {
      float* gw = grad_weight + o * in_features;
      for (std::int64_t s = 0; s < n; ++s) {
        const float go = grad_out[s * out_features + o];
        const float* x = in + s * in_features;
#pragma omp simd
        for (std::int64_t i = begin; i < end; ++i) gw[i] += go * x[i];
      }
    }
  }
}

}  // namespace cnn
