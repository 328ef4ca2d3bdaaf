// The fused conv + ReLU + pool for the seed's own shape, 1 input channel and a 3x3 kernel, with POOL
// CELLS in the SIMD lanes (the general kernels, conv_relu_pool.cpp, run filters in lanes). The op's
// tensors are NCHW, [filter][cell] per sample, so a vector of cells is one contiguous load or store:
// the forward writes its pooled values and winners, and the backward reads its gradients, without the
// [cell][filter] transposes that filters in lanes needed (those, and their 9-cell scalar tails, took
// about half of the forward's and backward's time).
//
// Each image is first copied into 16 planes, P[u][v][cell] = input pixel (2py + u, 2px + v) for cell
// (py, px), u, v in 0..3: the 4 x 4 input patch under each pool cell, one plane per patch position,
// flat over the cells (169 for the seed, padded with zeros to whole vectors). Conv position (a, b) of
// a cell reads tap (i, j) from plane (a + i, b + j). The planes are stored by cell vector,
// [cell vector][plane][lane], so that one pointer and constant offsets reach all 16 (a plane stride
// known only at run time took 16 pointers, more than the general registers, and reloads).
#include <algorithm>
#include <cstring>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "ops/conv_relu_pool_lanes.hpp"

namespace cnn::conv_pool {

namespace {

using simd::Vec;

constexpr int kSeedKernel = 3;
constexpr int kSeedTaps = kSeedKernel * kSeedKernel;
constexpr int kPatch = kPoolSize + kSeedKernel - 1;  // 4: the input rows and columns under a pool cell
constexpr int kPlanes = kPatch * kPatch;
// A forward block: kForwardFilters filters over one cell vector, 4 conv values each: 12 independent
// FMA chains of 9, each plane vector loaded once and multiplied by the 3 filters' weights (their 27
// weight vectors do not all fit the registers: the rest are memory operands). Measured per image at
// d 64 (forward, /tmp harness, us; before the planes were built by permutes and held in registers):
// 1 filter x 1-4 vectors 7.6-8.1, 2 x 1 5.5, 2 x 2 6.3, 3 x 1 4.4, 4 x 1 4.8, 4 x 2 6.4: loads, not
// the chains, set the pace (GCC folded each plane vector into every FMA that used it, one load
// each). With the planes in registers: 2 x 1 3.7-4.2, 3 x 1 3.7, 4 x 1 4.0. AVX2 (16 registers): 1.
constexpr int kForwardFilters = simd::kLanes == 16 ? 3 : 1;

// Floats of one cell vector's planes.
constexpr int kTile = kPlanes * simd::kLanes;

// An image's planes, zeroed, on whole cache lines: a 64-byte load that straddles two lines costs two
// (std::vector<float>'s storage is only 16-byte aligned).
struct AlignedPlanes {
  // (The floats through the vectors' storage: clang allows no address of a vector's element.)
  explicit AlignedPlanes(std::size_t floats)
      : vectors(floats / simd::kLanes, Vec{}), data(reinterpret_cast<float*>(vectors.data())) {}
  std::vector<Vec> vectors;  // Vec's alignment is its size: operator new aligns it (C++17)
  float* data;
};

// Floats of an image's planes: the cells rounded up to whole vectors.
std::size_t planes_size(int cells) {
  return static_cast<std::size_t>((cells + simd::kLanes - 1) / simd::kLanes) * kTile;
}

// The 16 planes of one image, pixel by pixel; the padding past the cells stays as it was (zeros from
// the caller).
void build_planes_scalar(float* planes, const float* image, int width, const TensorShape& p) {
  for (int py = 0; py < p.height; ++py)
    for (int px = 0; px < p.width; ++px) {
      const int cell = py * p.width + px;
      float* dst = planes + (cell / simd::kLanes) * kTile + cell % simd::kLanes;
      const float* patch = image + static_cast<std::ptrdiff_t>(2 * py) * width + 2 * px;
      for (int u = 0; u < kPatch; ++u)
        for (int v = 0; v < kPatch; ++v) dst[(u * kPatch + v) * simd::kLanes] = patch[u * width + v];
    }
}

// The same, a pool row at a time where an input row fits two AVX-512 registers: per patch row u,
// the input row's even or odd columns from v (one two-source permute per v) are the row's cells,
// stored with masks into the one or two cell vectors they fall in. Measured against the scalar copy
// (/tmp harness, d 64, us per image): forward 4.55 -> 3.96, backward 6.0 -> 5.5.
void build_planes(float* planes, const float* image, int width, const TensorShape& p) {
#ifdef __AVX512F__
  if (width <= 2 * simd::kLanes) {
    const __mmask16 low = static_cast<__mmask16>(width >= 16 ? 0xffff : (1u << width) - 1);
    const __mmask16 high = static_cast<__mmask16>(width > 16 ? (1u << (width - 16)) - 1 : 0);
    const std::uint32_t row_cells = (1u << p.width) - 1;
    __m512i columns[kPatch];  // lane px: column 2 px + v
    for (int v = 0; v < kPatch; ++v)
      columns[v] = _mm512_add_epi32(_mm512_slli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 1),
                                    _mm512_set1_epi32(v));
    for (int py = 0; py < p.height; ++py) {
      const int first = py * p.width, offset = first % simd::kLanes;
      float* tile = planes + (first / simd::kLanes) * kTile;
      // Lanes to the first cell vector (from lane `offset` on) and to the next.
      const auto here = static_cast<__mmask16>(row_cells & ((1u << (simd::kLanes - offset)) - 1));
      const auto next = static_cast<__mmask16>(row_cells & ~((1u << (simd::kLanes - offset)) - 1));
      for (int u = 0; u < kPatch; ++u) {
        const float* row = image + static_cast<std::ptrdiff_t>(2 * py + u) * width;
        const __m512 left = _mm512_maskz_loadu_ps(low, row), right = _mm512_maskz_loadu_ps(high, row + 16);
        for (int v = 0; v < kPatch; ++v) {
          const __m512 cells = _mm512_permutex2var_ps(left, columns[v], right);
          float* plane = tile + (u * kPatch + v) * simd::kLanes;
          _mm512_mask_storeu_ps(plane + offset, here, cells);
          if (next != 0) _mm512_mask_storeu_ps(plane + kTile + offset - simd::kLanes, next, cells);
        }
      }
    }
    return;
  }
#endif
  build_planes_scalar(planes, image, width, p);
}

// The first `count` lanes of a float or byte vector, stored or loaded (the rest zero). AVX-512 masks
// them (bytes: with AVX-512BW and VL); elsewhere a memcpy of a run-time length, a call around which every vector register is saved
// (GCC turns a loop over the lanes back into that call).
inline void store_lanes(float* dst, Vec v, int count) {
#ifdef __AVX512F__
  _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << count) - 1), reinterpret_cast<__m512>(v));
#else
  std::memcpy(dst, &v, static_cast<std::size_t>(count) * sizeof(float));
#endif
}
inline void store_lanes(std::uint8_t* dst, simd::ByteVec v, int count) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  _mm_mask_storeu_epi8(dst, static_cast<__mmask16>((1u << count) - 1), reinterpret_cast<__m128i>(v));
#else
  std::memcpy(dst, &v, static_cast<std::size_t>(count));
#endif
}
inline Vec load_lanes(const float* src, int count) {
#ifdef __AVX512F__
  return reinterpret_cast<Vec>(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), src));
#else
  Vec v{};
  std::memcpy(&v, src, static_cast<std::size_t>(count) * sizeof(float));
  return v;
#endif
}
inline simd::ByteVec load_lanes(const std::uint8_t* src, int count) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  return reinterpret_cast<simd::ByteVec>(_mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << count) - 1), src));
#else
  simd::ByteVec v{};
  std::memcpy(&v, src, static_cast<std::size_t>(count));
  return v;
#endif
}

// kFilters filters from f over the cell vector from c0 of one image: 4 conv values per cell (bias,
// then the taps in (i, j) order, as in the general kernel: the same bits), pooled, with the ReLU,
// stored NCHW.
template <int kFilters>
[[gnu::always_inline]] inline void forward_block(float* pooled, std::uint8_t* argmax, const float* planes, int cells,
                                                 const Vec (&w)[kFilters][kSeedTaps], const Vec (&b)[kFilters], int f,
                                                 int c0) {
  Vec conv[kFilters][kPoolCandidates];
  for (int k = 0; k < kFilters; ++k)
    for (Vec& c : conv[k]) c = b[k];
  const float* tile = planes + c0 * kPlanes;
  // Plane by plane in row-major order: each conv value meets its taps in (i, j) order.
#pragma GCC unroll 4
  for (int u = 0; u < kPatch; ++u)
#pragma GCC unroll 4
    for (int v = 0; v < kPatch; ++v) {
      Vec pixel = simd::load(tile + (u * kPatch + v) * simd::kLanes);
      simd::in_register(pixel);
#pragma GCC unroll 4
      for (int q = 0; q < kPoolCandidates; ++q) {
        const int i = u - q / kPoolSize, j = v - q % kPoolSize;
        if (i < 0 || i >= kSeedKernel || j < 0 || j >= kSeedKernel) continue;
        for (int k = 0; k < kFilters; ++k) conv[k][q] += pixel * w[k][i * kSeedKernel + j];
      }
    }
  const int count = std::min(simd::kLanes, cells - c0);
  for (int k = 0; k < kFilters; ++k) {
    // First maximum in candidate order: a later candidate wins only if strictly larger.
    Vec top = conv[k][0];
    simd::IVec winner{};
    for (int q = 1; q < kPoolCandidates; ++q) {
      const simd::IVec larger = conv[k][q] > top;
      top = larger ? conv[k][q] : top;
      winner = larger ? simd::IVec{} + q : winner;
    }
    const std::ptrdiff_t row = static_cast<std::ptrdiff_t>(f + k) * cells + c0;
    const Vec relu = top > Vec{} ? top : Vec{};  // it commutes with max
    const simd::ByteVec bytes = __builtin_convertvector(winner, simd::ByteVec);
    if (count == simd::kLanes) {
      simd::store(pooled + row, relu);
      std::memcpy(argmax + row, &bytes, sizeof(bytes));
    } else {
      store_lanes(pooled + row, relu, count);
      store_lanes(argmax + row, bytes, count);
    }
  }
}

// kFilters filters from f of one image, one cell vector at a time.
template <int kFilters>
void forward_filters(float* pooled, std::uint8_t* argmax, const float* planes, int cells, const float* weight,
                     const float* bias, int f) {
  Vec w[kFilters][kSeedTaps], b[kFilters];
  for (int k = 0; k < kFilters; ++k) {
    b[k] = simd::splat(bias[f + k]);
    for (int t = 0; t < kSeedTaps; ++t) w[k][t] = simd::splat(weight[(f + k) * kSeedTaps + t]);
  }
  for (int c0 = 0; c0 < cells; c0 += simd::kLanes) forward_block<kFilters>(pooled, argmax, planes, cells, w, b, f, c0);
}

}  // namespace

void forward_1x3x3(float* pooled, std::uint8_t* argmax, const float* in, const float* weight, const float* bias,
                   std::int64_t n, const SeedModel& m) {
  const TensorShape p = m.pooled();
  const int cells = p.height * p.width;
  AlignedPlanes planes(planes_size(cells));
  for (std::int64_t s = 0; s < n; ++s) {
    build_planes(planes.data, in + s * m.input.size(), m.input.width, p);
    float* out = pooled + s * m.filters * static_cast<std::int64_t>(cells);
    std::uint8_t* arg = argmax + s * m.filters * static_cast<std::int64_t>(cells);
    int f = 0;
    for (; f + kForwardFilters <= m.filters; f += kForwardFilters)
      forward_filters<kForwardFilters>(out, arg, planes.data, cells, weight, bias, f);
    if constexpr (kForwardFilters > 1)
      for (; f < m.filters; ++f) forward_filters<1>(out, arg, planes.data, cells, weight, bias, f);
  }
}

// The backward per filter: g (the pooled gradient where the ReLU passed it) times the input under the
// winning conv position's window, summed into the 9 tap gradients, and g into the bias gradient.
// The winner (a, b) = (q / 2, q % 2) picks, per lane, tap (i, j)'s pixel from plane (a + i, b + j):
// first the row, R[i][v] = a ? P[i + 1][v] : P[i][v] (12 selects, shared by the taps), then the
// column, pixel = b ? R[i][j + 1] : R[i][j] (9 selects): 21 selects and 9 FMAs per cell vector.
// (Measured against it, d 64, /tmp harness: 36 FMAs of g masked per candidate, 7.4 us per image
// against 5.4; the same as merge-masked FMAs, 7.4.) The sums run lane-wise over the cells of every
// sample of the call, then across the lanes, once per call.
void backward_1x3x3(float* grad_weight, float* grad_bias, const float* grad_pooled, const float* pooled,
                    const std::uint8_t* argmax, const float* in, std::int64_t n, const SeedModel& m) {
  const TensorShape p = m.pooled();
  const int cells = p.height * p.width;
  constexpr int kSums = kSeedTaps + 1;  // the taps, then the bias
  AlignedPlanes planes(planes_size(cells));
  std::vector<Vec> sums(static_cast<std::size_t>(m.filters) * kSums, Vec{});
  for (std::int64_t s = 0; s < n; ++s) {
    build_planes(planes.data, in + s * m.input.size(), m.input.width, p);
    const std::int64_t sample = s * m.filters * static_cast<std::int64_t>(cells);
    for (int f = 0; f < m.filters; ++f) {
      Vec acc[kSums];
      for (int t = 0; t < kSums; ++t) acc[t] = sums[static_cast<std::size_t>(f) * kSums + t];
      const std::int64_t row = sample + static_cast<std::int64_t>(f) * cells;
      for (int c0 = 0; c0 < cells; c0 += simd::kLanes) {
        const int count = std::min(simd::kLanes, cells - c0);
        Vec g, kept;
        simd::ByteVec winner_bytes;
        if (count == simd::kLanes) {
          g = simd::load(grad_pooled + row + c0);
          kept = simd::load(pooled + row + c0);
          std::memcpy(&winner_bytes, argmax + row + c0, sizeof(winner_bytes));
        } else {  // the last few cells: nothing past the tensors is read, and the other lanes are zero
          g = load_lanes(grad_pooled + row + c0, count);
          kept = load_lanes(pooled + row + c0, count);
          winner_bytes = load_lanes(argmax + row + c0, count);
        }
        g = kept > Vec{} ? g : Vec{};
        const simd::IVec winner = __builtin_convertvector(winner_bytes, simd::IVec);
        const simd::IVec lower = winner & 2, right = winner & 1;
        const float* tile = planes.data + c0 * kPlanes;
        // Each plane vector loaded once (GCC otherwise loads the middle rows' twice).
        Vec plane[kPatch][kPatch];
#pragma GCC unroll 4
        for (int u = 0; u < kPatch; ++u)
#pragma GCC unroll 4
          for (int v = 0; v < kPatch; ++v) {
            plane[u][v] = simd::load(tile + (u * kPatch + v) * simd::kLanes);
            simd::in_register(plane[u][v]);
          }
        Vec r[kSeedKernel][kPatch];
#pragma GCC unroll 3
        for (int i = 0; i < kSeedKernel; ++i)
#pragma GCC unroll 4
          for (int v = 0; v < kPatch; ++v) r[i][v] = lower ? plane[i + 1][v] : plane[i][v];
#pragma GCC unroll 3
        for (int i = 0; i < kSeedKernel; ++i)
#pragma GCC unroll 3
          for (int j = 0; j < kSeedKernel; ++j) acc[i * kSeedKernel + j] += (right ? r[i][j + 1] : r[i][j]) * g;
        acc[kSeedTaps] += g;
      }
      for (int t = 0; t < kSums; ++t) sums[static_cast<std::size_t>(f) * kSums + t] = acc[t];
    }
  }
  for (int f = 0; f < m.filters; ++f) {
    for (int t = 0; t < kSeedTaps; ++t)
      grad_weight[f * kSeedTaps + t] += simd::sum(sums[static_cast<std::size_t>(f) * kSums + t]);
    grad_bias[f] += simd::sum(sums[static_cast<std::size_t>(f) * kSums + kSeedTaps]);
  }
}

}  // namespace cnn::conv_pool
