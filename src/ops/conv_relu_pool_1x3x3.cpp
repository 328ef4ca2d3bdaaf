// The fused conv + ReLU + pool for the seed's own shape, 1 input channel and a 3x3 kernel, with
// everything in registers (conv_relu_pool_lanes.hpp). The general kernels (conv_relu_pool.cpp) gather
// each cell's window into a buffer first and keep the backward's per-tap sums in memory; here the taps
// unroll, so a filter vector's 9 weights (forward) or 9 tap sums (backward) stay in registers for the
// whole image. Same sums in the same order as the general kernels: the same bits.
#include <algorithm>
#include <cstring>
#include <utility>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "ops/conv_relu_pool_lanes.hpp"

namespace cnn::conv_pool {

namespace {

using simd::Vec;

constexpr int kSeedKernel = 3;
constexpr int kSeedTaps = kSeedKernel * kSeedKernel;
// Pool cells per forward block: 4 cells x 4 candidates = 16 independent FMA chains (the FMA's
// latency is 4 cycles and two issue per cycle, so fewer than 8 chains stall: one cell's 4 chains ran
// at half the FMA rate), plus 9 weights: 25 of AVX-512's 32 registers. AVX2 has 16: 2 cells.
constexpr int kBlockCells = simd::kLanes == 16 ? 4 : 2;

// A [cell][lane] tile of one filter vector to NCHW rows of the filters it holds (ReLU on the way:
// it commutes with max), kLanes cells at a time through a register transpose.
void store_tile(float* pooled, std::uint8_t* argmax, const float* best, const float* which, int f0, int lanes,
                int cells, std::int64_t sample_offset) {
  const int whole = cells / simd::kLanes * simd::kLanes;
  // The values first, then the winners: one 16 x 16 transpose at a time fits the registers (both at
  // once spilled).
  for (int c0 = 0; c0 < whole; c0 += simd::kLanes) {
    Vec values[simd::kLanes];
    for (int c = 0; c < simd::kLanes; ++c) values[c] = simd::load(best + (c0 + c) * simd::kLanes);
    simd::transpose(values);
    for (int f = 0; f < lanes; ++f) {
      const Vec v = values[f];
      simd::store(pooled + sample_offset + static_cast<std::int64_t>(f0 + f) * cells + c0,
                  v > simd::splat(0.0f) ? v : simd::splat(0.0f));
    }
  }
  for (int c0 = 0; c0 < whole; c0 += simd::kLanes) {
    Vec winners[simd::kLanes];
    for (int c = 0; c < simd::kLanes; ++c) winners[c] = simd::load(which + (c0 + c) * simd::kLanes);
    simd::transpose(winners);
    for (int f = 0; f < lanes; ++f) {
      const simd::ByteVec bytes = __builtin_convertvector(__builtin_convertvector(winners[f], simd::IVec), simd::ByteVec);
      std::memcpy(argmax + sample_offset + static_cast<std::int64_t>(f0 + f) * cells + c0, &bytes, sizeof(bytes));
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
  const int whole = cells / simd::kLanes * simd::kLanes;
  // The gradients first, then the winners: one 16 x 16 transpose at a time fits the registers.
  for (int c0 = 0; c0 < whole; c0 += simd::kLanes) {
    Vec grads[simd::kLanes];
    for (int f = 0; f < simd::kLanes; ++f) {
      const std::int64_t row = sample_offset + static_cast<std::int64_t>(f0 + f) * cells + c0;
      grads[f] = simd::splat(0.0f);
      if (f < lanes) grads[f] = simd::load(pooled + row) > simd::splat(0.0f) ? simd::load(grad_pooled + row) : grads[f];
    }
    simd::transpose(grads);
    for (int c = 0; c < simd::kLanes; ++c) simd::store(grad + (c0 + c) * simd::kLanes, grads[c]);
  }
  for (int c0 = 0; c0 < whole; c0 += simd::kLanes) {
    Vec winners[simd::kLanes];
    for (int f = 0; f < simd::kLanes; ++f) {
      simd::ByteVec bytes{};
      if (f < lanes) std::memcpy(&bytes, argmax + sample_offset + static_cast<std::int64_t>(f0 + f) * cells + c0, sizeof(bytes));
      winners[f] = __builtin_convertvector(__builtin_convertvector(bytes, simd::IVec), Vec);
    }
    simd::transpose(winners);
    for (int c = 0; c < simd::kLanes; ++c) simd::store(which + (c0 + c) * simd::kLanes, winners[c]);
  }
  for (int f = 0; f < lanes; ++f) {
    const std::int64_t base = sample_offset + static_cast<std::int64_t>(f0 + f) * cells;
    for (int c = whole; c < cells; ++c) {
      grad[c * simd::kLanes + f] = pooled[base + c] > 0.0f ? grad_pooled[base + c] : 0.0f;
      which[c * simd::kLanes + f] = static_cast<float>(argmax[base + c]);
    }
  }
}

// kCells pool cells side by side in one row, from column x = 2 px of the 4 input rows under them:
// their 4 x kCells conv values (bias, then the taps in order (i, j)), pooled in registers, the
// maxima and winners stored at best / which, one vector per cell.
// The loops run over the block's input pixels (4 rows x 2 kCells + 2 columns), each broadcast once
// and multiplied into every conv value whose window holds it: row-major pixels visit each conv
// value's taps in (i, j) order, so its sum is the same as tap by tap. (Tap by tap, the compiler kept
// shared pixels in registers and spilled.)
template <int kCells>
[[gnu::always_inline]] inline void pool_cells(float* best, float* which, const float* const row[4], int x,
                                              const Vec w[kSeedTaps], Vec b) {
  constexpr int kColumns = kPoolSize * kCells + kSeedKernel - 1;
  Vec conv[kCells][kPoolCandidates];
#pragma GCC unroll 16
  for (auto& cell : conv)
#pragma GCC unroll 4
    for (Vec& c : cell) c = b;
#pragma GCC unroll 4
  for (int r = 0; r < kPoolSize + kSeedKernel - 1; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < kColumns; ++c) {
      const Vec pixel = row[r][x + c] - Vec{};  // a broadcast (simd::splat's 0 + x costs a scalar add first)
#pragma GCC unroll 4
      for (int k = 0; k < kCells; ++k)
#pragma GCC unroll 4
        for (int q = 0; q < kPoolCandidates; ++q) {
          const int i = r - q / kPoolSize, j = c - kPoolSize * k - q % kPoolSize;
          if (i >= 0 && i < kSeedKernel && j >= 0 && j < kSeedKernel) conv[k][q] += pixel * w[i * kSeedKernel + j];
        }
    }
  for (int k = 0; k < kCells; ++k) {
    // First maximum in candidate order: a later candidate wins only if strictly larger.
    Vec top = conv[k][0], winner = simd::splat(0.0f);
    for (int q = 1; q < kPoolCandidates; ++q) {
      const auto larger = conv[k][q] > top;
      top = larger ? conv[k][q] : top;
      winner = larger ? simd::splat(static_cast<float>(q)) : winner;
    }
    simd::store(best + k * simd::kLanes, top);
    simd::store(which + k * simd::kLanes, winner);
  }
}

// The cells of a row in blocks of kBlockCells, and its last few in blocks of at least 2 where the row
// allows (a row of 13: 4, 4, 3, 2), so that every block keeps 8 or more chains going.
template <int... kSizes>
[[gnu::always_inline]] inline void pool_row(float* best, float* which, const float* const row[4], int cells_in_row,
                                            const Vec w[kSeedTaps], Vec b, std::integer_sequence<int, kSizes...>) {
  for (int px = 0; px < cells_in_row;) {
    const int left = cells_in_row - px;
    const int block = left >= kBlockCells + 2 ? kBlockCells : (left > kBlockCells ? left - 2 : left);
    ((block == kSizes + 1 ? pool_cells<kSizes + 1>(best + px * simd::kLanes, which + px * simd::kLanes, row,
                                                   kPoolSize * px, w, b)
                          : void()),
     ...);
    px += block;
  }
}

}  // namespace

void forward_1x3x3(float* pooled, std::uint8_t* argmax, const float* in, const std::vector<float>& weight_t,
                   const std::vector<float>& bias_t, std::int64_t n, const SeedModel& m, const LaneGeometry& g) {
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
        const std::size_t first = static_cast<std::size_t>(py * p.width) * simd::kLanes;
        pool_row(&best[first], &which[first], row, p.width, w, b, std::make_integer_sequence<int, kBlockCells>{});
      }
      store_tile(pooled, argmax, best.data(), which.data(), f0, std::min(simd::kLanes, m.filters - f0), g.cells,
                 s * m.filters * static_cast<std::int64_t>(g.cells));
    }
  }
}

// The backward per filter vector and cell: g (the ReLU-masked gradient) times the input under the
// winning candidate's window, added to the 9 tap sums; lanes differ in their winners.
//
// AVX-512: a cell's 4 x 4 input patch is 16 floats, one register; tap (i, j) of the winner (a, b)
// is patch element (a + i) * 4 + (b + j), so one permute per tap picks every lane's own pixel, from
// the patch shifted by the tap's offset (an unaligned load from a per-image copy of the patches),
// indexed by the winner's own offset a * 4 + b. One FMA per tap instead of four.
// AVX2 (8-lane permutes cannot index 16 floats): each candidate adds g where it won and zero
// elsewhere, four FMAs per tap; adding those exact zeros leaves the same sums.
void backward_1x3x3(std::vector<float>& grad_w_t, std::vector<float>& grad_b_t, const float* grad_pooled,
                    const float* pooled, const std::uint8_t* argmax, const float* in, std::int64_t n,
                    const SeedModel& m, const LaneGeometry& g) {
  const TensorShape p = m.pooled();
  const int width = m.input.width;
  // [cell][lane] tiles of the gradient and of the winners, side by side in one buffer.
  const std::size_t tile = static_cast<std::size_t>(g.cells) * simd::kLanes;
  std::vector<float> tiles(2 * tile, 0.0f);
  float* const grad = tiles.data();
  float* const which = grad + tile;
#ifdef __AVX512F__
  // Each cell's 4 x 4 patch, row by row, then zeros up to the last shifted load (offset 10 + 16).
  constexpr int kPatch = 16, kPatchStride = 32;
  std::vector<float> patches(static_cast<std::size_t>(g.cells) * kPatchStride, 0.0f);
#endif
  for (std::int64_t s = 0; s < n; ++s) {
    const float* image = in + s * m.input.size();
#ifdef __AVX512F__
    for (int py = 0; py < p.height; ++py)
      for (int px = 0; px < p.width; ++px)
        for (int r = 0; r < 4; ++r)
          std::memcpy(&patches[static_cast<std::size_t>(py * p.width + px) * kPatchStride + r * 4],
                      image + static_cast<std::ptrdiff_t>(2 * py + r) * width + 2 * px, 4 * sizeof(float));
#endif
    for (int v = 0; v < g.vectors; ++v) {
      const int f0 = v * simd::kLanes, lanes = std::min(simd::kLanes, m.filters - f0);
      // This vector's filters as [cell][lane]: the ReLU's gradient mask applied, and the winners.
      load_tile(grad, which, grad_pooled, pooled, argmax, f0, lanes, g.cells,
                s * m.filters * static_cast<std::int64_t>(g.cells));
      Vec acc[kSeedTaps];
      for (Vec& a : acc) a = simd::splat(0.0f);
      Vec bias_acc = simd::splat(0.0f);
#ifdef __AVX512F__
      for (int c = 0; c < g.cells; ++c) {
        const Vec gv = simd::load(&grad[static_cast<std::size_t>(c) * simd::kLanes]);
        const simd::IVec q = __builtin_convertvector(simd::load(&which[static_cast<std::size_t>(c) * simd::kLanes]),
                                                     simd::IVec);
        const __m512i winner = reinterpret_cast<__m512i>(q + (q & 2));  // a * 4 + b for q = a * 2 + b
        bias_acc += gv;
        const float* patch = &patches[static_cast<std::size_t>(c) * kPatchStride];
        for (int i = 0; i < kSeedKernel; ++i)
          for (int j = 0; j < kSeedKernel; ++j) {
            // (The masked form with every lane set: the plain one trips GCC 12's -Wmaybe-uninitialized
            // in its own header, PR 105593.)
            const Vec pixel = _mm512_mask_permutexvar_ps(gv, 0xffff, winner, simd::load(patch + i * 4 + j));
            acc[i * kSeedKernel + j] += pixel * gv;
          }
      }
      static_assert(kPatch == simd::kLanes, "one patch per register");
#else
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
#endif
      for (int t = 0; t < kSeedTaps; ++t) {
        float* total = &grad_w_t[static_cast<std::size_t>(t) * g.padded + f0];
        simd::store(total, simd::load(total) + acc[t]);
      }
      simd::store(&grad_b_t[f0], simd::load(&grad_b_t[f0]) + bias_acc);
    }
  }
}

}  // namespace cnn::conv_pool
