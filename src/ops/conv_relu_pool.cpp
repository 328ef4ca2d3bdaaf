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
#include "ops/simd.hpp"

namespace cnn {

namespace {

constexpr int kPoolSize = 2;
constexpr int kPoolCandidates = kPoolSize * kPoolSize;

// Input offset of each tap (c, i, j) relative to the window's top-left input position.
int window_offsets(int* offsets /*[C*K*K]*/, const SeedModel& m) {
  const int width_in = m.input.width, k = m.kernel;
  const int plane = m.input.height * width_in;
  int t = 0;
  for (int c = 0; c < m.input.channels; ++c)
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j) offsets[t++] = c * plane + i * width_in + j;
  return t;
}

// The geometry both directions share: filters padded up to whole SIMD vectors, and each tap's
// input offset.
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
    window_offsets(offsets.data(), m);
  }
};

// The window inputs of the four conv positions of pool cell (py, px): dst[q][t] for candidate
// q = a*2 + b at conv position (2py + a, 2px + b).
void gather_cell_windows(float* dst /*[4, window]*/, const float* image /*[C,H,W]*/, int py, int px,
                         const LaneGeometry& g, const SeedModel& m) {
  for (int q = 0; q < kPoolCandidates; ++q) {
    const int origin = (kPoolSize * py + q / kPoolSize) * m.input.width + kPoolSize * px + q % kPoolSize;
    for (int t = 0; t < g.window; ++t) dst[q * g.window + t] = image[origin + g.offsets[static_cast<std::size_t>(t)]];
  }
}

// ---- The seed's own shape, 1 input channel and a 3x3 kernel, with everything in registers.
// The general kernels below gather each cell's window into a buffer first and keep the backward's
// per-tap sums in memory; for 1x3x3 the taps unroll, so a filter vector's 9 weights (forward) or 9
// tap sums (backward) stay in registers for the whole image, and each FMA broadcasts its input pixel
// straight from the image (a cell's 2x2 candidates read a 4x4 patch through 4 row pointers and
// constant column offsets). Same sums in the same order as the general kernels: the same bits.

constexpr int kSeedKernel = 3;
constexpr int kSeedTaps = kSeedKernel * kSeedKernel;

bool is_one_channel_3x3(const SeedModel& m) { return m.input.channels == 1 && m.kernel == kSeedKernel; }

// A [cell][lane] tile of one filter vector to NCHW rows of the filters it holds (ReLU on the way:
// it commutes with max), kLanes cells at a time through a register transpose.
void store_tile(float* pooled, std::uint8_t* argmax, const float* best, const float* which, int f0, int lanes,
                int cells, std::int64_t sample_offset) {
  using simd::Vec;
  const int whole = cells / simd::kLanes * simd::kLanes;
  for (int c0 = 0; c0 < whole; c0 += simd::kLanes) {
    Vec values[simd::kLanes], winners[simd::kLanes];
    for (int c = 0; c < simd::kLanes; ++c) {
      values[c] = simd::load(best + (c0 + c) * simd::kLanes);
      winners[c] = simd::load(which + (c0 + c) * simd::kLanes);
    }
    simd::transpose(values);
    simd::transpose(winners);
    for (int f = 0; f < lanes; ++f) {
      const std::int64_t row = sample_offset + static_cast<std::int64_t>(f0 + f) * cells + c0;
      const Vec v = values[f];
      simd::store(pooled + row, v > simd::splat(0.0f) ? v : simd::splat(0.0f));
      const simd::ByteVec bytes = __builtin_convertvector(__builtin_convertvector(winners[f], simd::IVec), simd::ByteVec);
      std::memcpy(argmax + row, &bytes, sizeof(bytes));
    }
  }
  for (int f = 0; f < lanes; ++f) {
    float* out = pooled + sample_offset + static_cast<std::int64_t>(f0 + f) * cells;
    std::uint8_t* arg = argmax + sample_offset + static_cast<std::int64_t>(f0 + f) * cells;
    for (int c = whole; c < cells; ++c) {
      const float value = best[c * simd::kLanes + f];
      out[c] = value > 0.0f ? value : 0.0f;
      arg[c] = static_cast<std::uint8_t>(which[c * simd::kLanes + f]);
    }
  }
}

// The inverse for the backward: lanes filters' NCHW rows of one sample to [cell][lane] tiles, the
// ReLU's gradient mask applied (grad where pooled > 0) and the winners as floats. Lanes past `lanes`
// are zero.
void load_tile(float* grad, float* which, const float* grad_pooled, const float* pooled, const std::uint8_t* argmax,
               int f0, int lanes, int cells, std::int64_t sample_offset) {
  using simd::Vec;
  const int whole = cells / simd::kLanes * simd::kLanes;
  for (int c0 = 0; c0 < whole; c0 += simd::kLanes) {
    Vec grads[simd::kLanes], winners[simd::kLanes];
    for (int f = 0; f < simd::kLanes; ++f) {
      if (f >= lanes) {
        grads[f] = winners[f] = simd::splat(0.0f);
        continue;
      }
      const std::int64_t row = sample_offset + static_cast<std::int64_t>(f0 + f) * cells + c0;
      const Vec g = simd::load(grad_pooled + row);
      grads[f] = simd::load(pooled + row) > simd::splat(0.0f) ? g : simd::splat(0.0f);
      simd::ByteVec bytes;
      std::memcpy(&bytes, argmax + row, sizeof(bytes));
      winners[f] = __builtin_convertvector(__builtin_convertvector(bytes, simd::IVec), Vec);
    }
    simd::transpose(grads);
    simd::transpose(winners);
    for (int c = 0; c < simd::kLanes; ++c) {
      simd::store(grad + (c0 + c) * simd::kLanes, grads[c]);
      simd::store(which + (c0 + c) * simd::kLanes, winners[c]);
    }
  }
  for (int f = 0; f < lanes; ++f) {
    const std::int64_t base = sample_offset + static_cast<std::int64_t>(f0 + f) * cells;
    for (int c = whole; c < cells; ++c) {
      grad[c * simd::kLanes + f] = pooled[base + c] > 0.0f ? grad_pooled[base + c] : 0.0f;
      which[c * simd::kLanes + f] = static_cast<float>(argmax[base + c]);
    }
  }
}

void forward_1x3x3(float* pooled, std::uint8_t* argmax, const float* in, const std::vector<float>& weight_t,
                   const std::vector<float>& bias_t, std::int64_t n, const SeedModel& m, const LaneGeometry& g) {
  using simd::Vec;
  const TensorShape p = m.pooled();
  const int width = m.input.width;
  std::vector<float> best(static_cast<std::size_t>(g.cells) * simd::kLanes), which(best.size());
  for (std::int64_t s = 0; s < n; ++s) {
    const float* image = in + s * m.input.size();
    for (int v = 0; v < g.vectors; ++v) {
      const int f0 = v * simd::kLanes;
      Vec w[kSeedTaps];
      for (int t = 0; t < kSeedTaps; ++t) w[t] = simd::load(&weight_t[static_cast<std::size_t>(t) * g.padded + f0]);
      const Vec b = simd::load(&bias_t[f0]);
      for (int py = 0; py < p.height; ++py) {
        const float* row[4];
        for (int r = 0; r < 4; ++r) row[r] = image + static_cast<std::ptrdiff_t>(2 * py + r) * width;
        for (int px = 0; px < p.width; ++px) {
          const int x = 2 * px;
          Vec conv[kPoolCandidates] = {b, b, b, b};
          for (int i = 0; i < kSeedKernel; ++i)
            for (int j = 0; j < kSeedKernel; ++j)
              for (int q = 0; q < kPoolCandidates; ++q)
                conv[q] += row[q / kPoolSize + i][x + q % kPoolSize + j] * w[i * kSeedKernel + j];
          Vec top = conv[0], winner = simd::splat(0.0f);
          for (int q = 1; q < kPoolCandidates; ++q) {
            const auto larger = conv[q] > top;
            top = larger ? conv[q] : top;
            winner = larger ? simd::splat(static_cast<float>(q)) : winner;
          }
          const int cell = py * p.width + px;
          simd::store(&best[static_cast<std::size_t>(cell) * simd::kLanes], top);
          simd::store(&which[static_cast<std::size_t>(cell) * simd::kLanes], winner);
        }
      }
      store_tile(pooled, argmax, best.data(), which.data(), f0, std::min(simd::kLanes, m.filters - f0), g.cells,
                 s * m.filters * static_cast<std::int64_t>(g.cells));
    }
  }
}

void backward_1x3x3(std::vector<float>& grad_w_t, std::vector<float>& grad_b_t, const float* grad_pooled,
                    const float* pooled, const std::uint8_t* argmax, const float* in, std::int64_t n,
                    const SeedModel& m, const LaneGeometry& g) {
  using simd::Vec;
  const TensorShape p = m.pooled();
  const int width = m.input.width;
  // [cell][lane] tiles of the gradient and of the winners, side by side in one buffer.
  const std::size_t tile = static_cast<std::size_t>(g.cells) * simd::kLanes;
  std::vector<float> tiles(2 * tile, 0.0f);
  float* const grad = tiles.data();
  float* const which = grad + tile;
  for (std::int64_t s = 0; s < n; ++s) {
    const float* image = in + s * m.input.size();
    for (int v = 0; v < g.vectors; ++v) {
      const int f0 = v * simd::kLanes, lanes = std::min(simd::kLanes, m.filters - f0);
      // This vector's filters as [cell][lane]: the ReLU's gradient mask applied, and the winners.
      load_tile(grad, which, grad_pooled, pooled, argmax, f0, lanes, g.cells,
                s * m.filters * static_cast<std::int64_t>(g.cells));
      Vec acc[kSeedTaps];
      for (Vec& a : acc) a = simd::splat(0.0f);
      Vec bias_acc = simd::splat(0.0f);
      for (int py = 0; py < p.height; ++py) {
        const float* row[4];
        for (int r = 0; r < 4; ++r) row[r] = image + static_cast<std::ptrdiff_t>(2 * py + r) * width;
        for (int px = 0; px < p.width; ++px) {
          const int x = 2 * px;
          const std::size_t cell = static_cast<std::size_t>(py * p.width + px) * simd::kLanes;
          const Vec gv = simd::load(&grad[cell]);
          const Vec winner = simd::load(&which[cell]);
          bias_acc += gv;
          for (int q = 0; q < kPoolCandidates; ++q) {
            const Vec g_q = winner == simd::splat(static_cast<float>(q)) ? gv : simd::splat(0.0f);
            for (int i = 0; i < kSeedKernel; ++i)
              for (int j = 0; j < kSeedKernel; ++j)
                acc[i * kSeedKernel + j] += row[q / kPoolSize + i][x + q % kPoolSize + j] * g_q;
          }
        }
      }
      for (int t = 0; t < kSeedTaps; ++t) {
        float* total = &grad_w_t[static_cast<std::size_t>(t) * g.padded + f0];
        simd::store(total, simd::load(total) + acc[t]);
      }
      simd::store(&grad_b_t[f0], simd::load(&grad_b_t[f0]) + bias_acc);
    }
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
  const TensorShape p = m.pooled();
  const LaneGeometry geometry(m);
  const int window = geometry.window, vectors = geometry.vectors, padded = geometry.padded, cells = geometry.cells;
  // weight_t[t][f] = weight[f][t]; bias_t likewise, zero-padded to whole vectors.
  std::vector<float> weight_t(static_cast<std::size_t>(window) * padded, 0.0f), bias_t(padded, 0.0f);
  for (int f = 0; f < m.filters; ++f) {
    bias_t[f] = bias[f];
    for (int t = 0; t < window; ++t) weight_t[static_cast<std::size_t>(t) * padded + f] = weight[f * window + t];
  }
  if (is_one_channel_3x3(m)) return forward_1x3x3(pooled, argmax, in, weight_t, bias_t, n, m, geometry);
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
  const LaneGeometry geometry(m);
  const int window = geometry.window, padded = geometry.padded;
  std::vector<float> grad_w_t(static_cast<std::size_t>(window) * padded, 0.0f), grad_b_t(padded, 0.0f);
  if (is_one_channel_3x3(m))
    backward_1x3x3(grad_w_t, grad_b_t, grad_pooled, pooled, argmax, in, n, m, geometry);
  else
    backward_general(grad_w_t, grad_b_t, grad_pooled, pooled, argmax, in, n, m, geometry);
  // Back to [F, C, K, K]: accumulate into the caller's gradients.
  for (int f = 0; f < m.filters; ++f) {
    grad_bias[f] += grad_b_t[f];
    for (int t = 0; t < window; ++t) grad_weight[f * window + t] += grad_w_t[static_cast<std::size_t>(t) * padded + f];
  }
}

}  // namespace cnn
