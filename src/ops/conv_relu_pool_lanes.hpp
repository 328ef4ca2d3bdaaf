// What the fused conv + ReLU + pool's kernels share (src/ops/conv_relu_pool.cpp, the general shape;
// src/ops/conv_relu_pool_1x3x3.cpp, the seed's 1x3x3): filters run in SIMD lanes, padded up to whole
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

// conv_relu_pool_forward for is_one_channel_3x3, from the transposed, padded weights and bias.
void forward_1x3x3(float* pooled, std::uint8_t* argmax, const float* in, const std::vector<float>& weight_t,
                   const std::vector<float>& bias_t, std::int64_t n, const SeedModel& m, const LaneGeometry& g);

// conv_relu_pool_backward for is_one_channel_3x3: adds to grad_w_t [tap][padded] and grad_b_t.
void backward_1x3x3(std::vector<float>& grad_w_t, std::vector<float>& grad_b_t, const float* grad_pooled,
                    const float* pooled, const std::uint8_t* argmax, const float* in, std::int64_t n,
                    const SeedModel& m, const LaneGeometry& g);

}  // namespace cnn::conv_pool
