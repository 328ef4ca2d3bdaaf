// The fused first layer of the seed CNN: convolution + bias + ReLU + 2x2/2 max-pool, and its gradient
// at the pool winners.
//
// The arithmetic runs across FILTERS in SIMD lanes (filters are the one long, regular dimension:
// 32..256), while the tensors stay NCHW at the function boundary. A pool cell's window inputs are
// the same for every filter, so each is loaded once and broadcast; pooling and the winner's gradient
// become lane-wise selects instead of scalar searches.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cnn/ops.hpp"
#include "ops/conv_relu_pool_lanes.hpp"
#include "ops/simd.hpp"

namespace cnn {

namespace {

using conv_pool::kPoolCandidates;
using conv_pool::kPoolSize;
using conv_pool::LaneGeometry;

// The window inputs of the four conv positions of pool cell (py, px): dst[q][t] for candidate
// q = a*2 + b at conv position (2py + a, 2px + b).
void gather_cell_windows(float* dst /*[4, window]*/, const float* image /*[C,H,W]*/, int py, int px,
                         const LaneGeometry& g, const SeedModel& m) {
  for (int q = 0; q < kPoolCandidates; ++q) {
    const int origin = (kPoolSize * py + q / kPoolSize) * m.input.width + kPoolSize * px + q % kPoolSize;
    for (int t = 0; t < g.window; ++t) dst[q * g.window + t] = image[origin + g.offsets[static_cast<std::size_t>(t)]];
  }
}

// The general backward (any channels and kernel): each cell's windows gathered first, the per-tap
// sums in memory. Adds to grad_w_t [tap][padded filters] and grad_b_t.
void backward_general(std::vector<float>& grad_w_t, std::vector<float>& grad_b_t, const float* grad_pooled,
                      const float* pooled, const std::uint8_t* argmax, const float* in, std::int64_t n,
                      const SeedModel& m, const LaneGeometry& geometry) {
  using simd::Vec;
  const TensorShape p = m.pooled();
  const int window = geometry.window, vectors = geometry.vectors, padded = geometry.padded, cells = geometry.cells;
  std::vector<float> grad_t(static_cast<std::size_t>(cells) * padded);   // [cell][filter], masked by ReLU
  std::vector<float> which_t(grad_t.size());                            // [cell][filter], 0..3
  std::vector<float> window_in(static_cast<std::size_t>(cells) * kPoolCandidates * window);  // [cell][q][t]
  std::vector<Vec> acc(static_cast<std::size_t>(window));
  for (std::int64_t s = 0; s < n; ++s) {
    const float* image = in + s * m.input.size();
    for (int f = 0; f < m.filters; ++f) {
      const std::int64_t base = (s * m.filters + f) * cells;
      for (int c = 0; c < cells; ++c) {
        grad_t[static_cast<std::size_t>(c) * padded + f] = pooled[base + c] > 0.0f ? grad_pooled[base + c] : 0.0f;
        which_t[static_cast<std::size_t>(c) * padded + f] = static_cast<float>(argmax[base + c]);
      }
    }
    for (int py = 0; py < p.height; ++py)
      for (int px = 0; px < p.width; ++px)
        gather_cell_windows(&window_in[static_cast<std::size_t>(py * p.width + px) * kPoolCandidates * window], image,
                            py, px, geometry, m);
    for (int v = 0; v < vectors; ++v) {
      const int f0 = v * simd::kLanes;
      for (Vec& a : acc) a = simd::splat(0.0f);
      Vec bias_acc = simd::splat(0.0f);
      for (int c = 0; c < cells; ++c) {
        const Vec g = simd::load(&grad_t[static_cast<std::size_t>(c) * padded + f0]);
        const Vec which = simd::load(&which_t[static_cast<std::size_t>(c) * padded + f0]);
        bias_acc += g;
        const float* cell_in = &window_in[static_cast<std::size_t>(c) * kPoolCandidates * window];
        for (int q = 0; q < kPoolCandidates; ++q) {
          const Vec g_q = which == simd::splat(static_cast<float>(q)) ? g : simd::splat(0.0f);
          for (int t = 0; t < window; ++t) acc[static_cast<std::size_t>(t)] += cell_in[q * window + t] * g_q;
        }
      }
      for (int t = 0; t < window; ++t) {
        Vec total = simd::load(&grad_w_t[static_cast<std::size_t>(t) * padded + f0]) + acc[static_cast<std::size_t>(t)];
        simd::store(&grad_w_t[static_cast<std::size_t>(t) * padded + f0], total);
      }
      simd::store(&grad_b_t[f0], simd::load(&grad_b_t[f0]) + bias_acc);
    }
  }
}

}  // namespace

// Forward, vectorised across filters: for each pool cell, the K*K window inputs of its four conv
// positions are broadcast, and every filter's four conv values are computed side by side in SIMD
// lanes, then pooled in registers. Filters are padded up to whole vectors; padded lanes compute
// zeros that are never stored. Sums run in the order bias, then taps (c, i, j).
void conv_relu_pool_forward(float* pooled, std::uint8_t* argmax, const float* in, const float* weight,
                            const float* bias, std::int64_t n, const SeedModel& m) {
  using simd::Vec;
  if (conv_pool::is_one_channel_3x3(m)) return conv_pool::forward_1x3x3(pooled, argmax, in, weight, bias, n, m);
  const TensorShape p = m.pooled();
  const LaneGeometry geometry(m);
  const int window = geometry.window, vectors = geometry.vectors, padded = geometry.padded, cells = geometry.cells;
  // weight_t[t][f] = weight[f][t]; bias_t likewise, zero-padded to whole vectors.
  std::vector<float> weight_t(static_cast<std::size_t>(window) * padded, 0.0f), bias_t(padded, 0.0f);
  for (int f = 0; f < m.filters; ++f) {
    bias_t[f] = bias[f];
    for (int t = 0; t < window; ++t) weight_t[static_cast<std::size_t>(t) * padded + f] = weight[f * window + t];
  }
  std::vector<float> best_t(static_cast<std::size_t>(cells) * padded);  // [cell][filter], pooled, pre-ReLU
  std::vector<float> which_t(best_t.size());                              // [cell][filter], 0..3
  std::vector<float> window_in(static_cast<std::size_t>(kPoolCandidates) * window);
  for (std::int64_t s = 0; s < n; ++s) {
    const float* image = in + s * m.input.size();
    for (int py = 0; py < p.height; ++py)
      for (int px = 0; px < p.width; ++px) {
        gather_cell_windows(window_in.data(), image, py, px, geometry, m);
        const std::size_t cell = static_cast<std::size_t>(py * p.width + px) * padded;
        for (int v = 0; v < vectors; ++v) {
          const int f0 = v * simd::kLanes;
          Vec conv[kPoolCandidates];
          for (int q = 0; q < kPoolCandidates; ++q) conv[q] = simd::load(&bias_t[f0]);
          for (int t = 0; t < window; ++t) {
            const Vec w = simd::load(&weight_t[static_cast<std::size_t>(t) * padded + f0]);
            for (int q = 0; q < kPoolCandidates; ++q) conv[q] += window_in[q * window + t] * w;
          }
          // First maximum in candidate order: a later candidate wins only if strictly larger.
          Vec best = conv[0], which = simd::splat(0.0f);
          for (int q = 1; q < kPoolCandidates; ++q) {
            const auto larger = conv[q] > best;
            best = larger ? conv[q] : best;
            which = larger ? simd::splat(static_cast<float>(q)) : which;
          }
          simd::store(&best_t[cell + f0], best);
          simd::store(&which_t[cell + f0], which);
        }
      }
    // Back to NCHW, with the ReLU (it commutes with max).
    for (int f = 0; f < m.filters; ++f) {
      float* out = pooled + (s * m.filters + f) * cells;
      std::uint8_t* arg = argmax + (s * m.filters + f) * cells;
      for (int c = 0; c < cells; ++c) {
        const float value = best_t[static_cast<std::size_t>(c) * padded + f];
        out[c] = value > 0.0f ? value : 0.0f;
        arg[c] = static_cast<std::uint8_t>(which_t[static_cast<std::size_t>(c) * padded + f]);
      }
    }
  }
}

// Backward, vectorised across filters like the forward. Per filter:
//   g      = grad_pooled if pooled > 0 else 0                  (ReLU gradient)
//   dW[t] += sum_cells g * in[winner position + offset_t]     (only the pool winner gets gradient)
//   db    += sum_cells g
// The winner differs between filters, so each of the four candidates contributes g where it won and
// zero elsewhere; its window inputs are the same for all filters and are broadcast.
void conv_relu_pool_backward(float* grad_weight, float* grad_bias, const float* grad_pooled, const float* pooled,
                             const std::uint8_t* argmax, const float* in, std::int64_t n, const SeedModel& m) {
  if (conv_pool::is_one_channel_3x3(m))
    return conv_pool::backward_1x3x3(grad_weight, grad_bias, grad_pooled, pooled, argmax, in, n, m);
  const LaneGeometry geometry(m);
  const int window = geometry.window, padded = geometry.padded;
  std::vector<float> grad_w_t(static_cast<std::size_t>(window) * padded, 0.0f), grad_b_t(padded, 0.0f);
  backward_general(grad_w_t, grad_b_t, grad_pooled, pooled, argmax, in, n, m, geometry);
  // Back to [F, C, K, K]: accumulate into the caller's gradients.
  for (int f = 0; f < m.filters; ++f) {
    grad_bias[f] += grad_b_t[f];
    for (int t = 0; t < window; ++t) grad_weight[f * window + t] += grad_w_t[static_cast<std::size_t>(t) * padded + f];
  }
}

}  // namespace cnn
