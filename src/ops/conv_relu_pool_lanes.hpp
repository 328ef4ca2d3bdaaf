// What the fused conv + ReLU + pool's kernels share (src/ops/conv_relu_pool.cpp, the general shape;
// src/ops/conv_relu_pool_1x3x3.cpp, the seed's 1x3x3, which runs pool cells in lanes instead): filters run in SIMD lanes, padded up to whole
// vectors, with the weights and their gradients held transposed, [tap][padded filters]. Private to src/.
#pragma once

#include <cstdint>
#include <vector>

#include "cnn/model.hpp"
#include "ops/simd.hpp"

namespace cnn::conv_pool {

constexpr int kPoolSize = 2;
constexpr int kPoolCandidates = kPoolSize * kPoolSize;

// The geometry both directions share: filters padded up to whole SIMD vectors, and each tap's
// input offset (c, i, j) relative to the window's top-left input position.
struct LaneGeometry {
  int window = 0;   // C*K*K taps
  int vectors = 0;  // SIMD vectors covering the filters
  int padded = 0;   // filters rounded up to whole vectors
  int cells = 0;    // pool cells per filter
  std::vector<int> offsets;

  explicit LaneGeometry(const SeedModel& m)
      : window(m.input.channels * m.kernel * m.kernel),
        vectors((m.filters + simd::kLanes - 1) / simd::kLanes),
        padded(vectors * simd::kLanes),
        cells(m.pooled().height * m.pooled().width),
        offsets(static_cast<std::size_t>(window)) {
    const int width_in = m.input.width, k = m.kernel, plane = m.input.height * width_in;
    int t = 0;
    for (int c = 0; c < m.input.channels; ++c)
      for (int i = 0; i < k; ++i)
        for (int j = 0; j < k; ++j) offsets[static_cast<std::size_t>(t++)] = c * plane + i * width_in + j;
  }
};

// The seed's own shape: 1 input channel, a 3x3 kernel (src/ops/conv_relu_pool_1x3x3.cpp).
inline bool is_one_channel_3x3(const SeedModel& m) { return m.input.channels == 1 && m.kernel == 3; }

// conv_relu_pool_forward for is_one_channel_3x3 (cells in lanes, from the NCHW weights and bias).
void forward_1x3x3(float* pooled, std::uint8_t* argmax, const float* in, const float* weight, const float* bias,
                   std::int64_t n, const SeedModel& m);

// conv_relu_pool_backward for is_one_channel_3x3: adds to grad_weight [F, 1, 3, 3] and grad_bias.
void backward_1x3x3(float* grad_weight, float* grad_bias, const float* grad_pooled, const float* pooled,
                    const std::uint8_t* argmax, const float* in, std::int64_t n, const SeedModel& m);

}  // namespace cnn::conv_pool
