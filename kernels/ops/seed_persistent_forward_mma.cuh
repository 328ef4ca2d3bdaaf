// Phase A of the persistent seed kernel on tensor cores (seed_persistent_phases.cuh has the other
// phases; seed_persistent.hpp the ownership): this block's columns for every sample, conv + ReLU +
// pool and their part of each sample's logits.
//
// The conv as one bf16 mma.sync m16n8k16 per (16 samples, 2 filters, one pool cell):
//   A [16 samples x 16]: each row one sample's 4x4 input patch of the cell, as raw uint8 values, which
//     bf16 holds exactly (the 1/255 is applied once to the pooled sum, not to every pixel);
//   B [16 x 8]: column (filter, conv position p of the cell's 2x2) holds the filter's 3x3 taps at
//     p's offset in the 4x4 patch, zero elsewhere, so k = 16 has no padding;
//   C [16 x 8] fp32: each sample's four conv outputs of both filters; a thread holds two of one
//     filter's four, so the pool's maximum is one max and one shuffle.
// Each tap weight is split into three bf16 parts (hi + mid + lo: 24 significant bits, the fp32 value)
// and each part is one mma into the same fp32 sum: products of an 8-bit pixel and an 8-bit part are
// exact, so the conv sums agree with the fp32 kernel's to rounding. The three parts of every filter
// pair, as each lane's B fragments, are built once per step (the update changes the weights) into
// the shared memory the backward uses for its patches.
// The fc part stays on the CUDA cores: each pooled value times its column's 10 weights, the two
// lanes that hold a value taking 5 outputs each.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/mma_instructions.cuh"
#include "ops/seed_persistent_layout.cuh"

namespace cnn::cuda::persistent {

// One tap weight as three bf16 parts whose sum is the float (hi: the nearest bf16, mid and lo: the
// nearest to what is left): 24 significant bits.
struct WeightParts {
  float part[kConvWeightParts];
};
__device__ __forceinline__ WeightParts split_weight(float w) {
  WeightParts p;
  float rest = w;
#pragma unroll
  for (int r = 0; r < kConvWeightParts; ++r) {
    p.part[r] = __bfloat162float(__float2bfloat16_rn(rest));
    rest -= p.part[r];  // exact: the part is rest rounded to 8 bits
  }
  return p;
}

// B fragment element k (0..15, a position in the 4x4 patch) of column (filter f, conv position p):
// the tap under k when the 3x3 window sits at p's offset (a, b) = (p / 2, p % 2), else 0.
__device__ __forceinline__ float tap_at(const float* smem, const SharedLayout& l, int filters, int f, int p, int k) {
  const int i = (k >> 2) - (p >> 1);
  const int j = (k & 3) - (p & 1);
  if (f >= filters || i < 0 || i >= kSeedKernel || j < 0 || j >= kSeedKernel) return 0.0f;
  return smem[l.conv + f * kRow + i * kSeedKernel + j];
}

// Every lane's B fragments of every filter pair and part: uint2 {k 2t..2t+1, k 2t+8..2t+9} of
// column g (lane = 4g + t), at [(pair * parts + part) * 32 + lane].
__device__ inline void build_conv_fragments(const Shape& s, float* smem, const SharedLayout& l) {
  uint2* fragments = reinterpret_cast<uint2*>(smem + l.conv_fragments);
  const int pairs = (s.filters + 1) / 2;
  for (int e = threadIdx.x; e < pairs * 32; e += kThreads) {
    const int pair = e / 32;
    const int lane = e - pair * 32;
    const int g = lane >> 2, t = lane & 3;
    const int f = 2 * pair + (g >> 2);
    const int p = g & 3;
    WeightParts w[4];
    const int ks[4] = {2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9};
#pragma unroll
    for (int q = 0; q < 4; ++q) w[q] = split_weight(tap_at(smem, l, s.filters, f, p, ks[q]));
#pragma unroll
    for (int r = 0; r < kConvWeightParts; ++r)
      fragments[(pair * kConvWeightParts + r) * 32 + lane] =
          make_uint2(MmaFormat<Precision::kBf16>::pack(w[0].part[r], w[1].part[r]),
                     MmaFormat<Precision::kBf16>::pack(w[2].part[r], w[3].part[r]));
  }
}

// Two adjacent uint8 pixels as a bf16 pair (exact), the first in the low half: the mma's order.
__device__ __forceinline__ std::uint32_t pixel_pair(const std::uint8_t* pixels, bool valid) {
  if (!valid) return 0u;
  const unsigned two = __ldg(reinterpret_cast<const unsigned short*>(pixels));
  return MmaFormat<Precision::kBf16>::pack(static_cast<float>(two & 0xffu), static_cast<float>(two >> 8));
}

// A. A warp per 16 samples at a time; for each pool cell the block's columns touch, the A fragment
// (rows g and g+8: samples; k 2t..2t+1 and 2t+8..2t+9: patch rows t/2 and t/2+2, columns 2(t%2) and
// 2(t%2)+1, two adjacent bytes) is read once and serves every filter pair of the cell in the block's
// range. Lanes 4g+t and 4g+(t^1) hold the same pooled values (filter 2*pair + t/2) and take outputs
// 0-4 and 5-9; lanes t and t^2 (the pair's two filters) are summed at the end, in that fixed order.
__device__ inline void forward_phase_mma(const SeedPersistentArgs& a, const Shape& s, const Ownership& own, float* smem,
                                         const SharedLayout& l, int step) {
  build_conv_fragments(s, smem, l);
  __syncthreads();
  const uint2* fragments = reinterpret_cast<const uint2*>(smem + l.conv_fragments);
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int g = lane >> 2, t = lane & 3;
  const int o_first = (t & 1) * 5;
  const std::int64_t step_first = static_cast<std::int64_t>(step) * a.order_stride;
  const std::int64_t groups = (s.n + 15) / 16;
  const std::int64_t own_end = own.first + own.count;
  for (std::int64_t group = warp; group < groups; group += kThreads / 32) {
    const std::int64_t sample[2] = {group * 16 + g, group * 16 + g + 8};
    const bool valid[2] = {sample[0] < s.n, sample[1] < s.n};
    const std::uint8_t* image[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      image[h] = valid[h] ? a.images + static_cast<std::int64_t>(__ldg(a.order + step_first + sample[h])) * s.image
                          : a.images;
    float acc[2][5];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int o = 0; o < 5; ++o) acc[h][o] = 0.0f;
    for (int c = 0; c < own.cells; ++c) {
      const int cell = own.first_cell + c;
      const int py = cell / s.pooled_width;
      const int px = cell - py * s.pooled_width;
      const std::int64_t at = static_cast<std::int64_t>(kPoolWindow * py + (t >> 1)) * s.width + kPoolWindow * px + 2 * (t & 1);
      std::uint32_t fa[4];
      fa[0] = pixel_pair(image[0] + at, valid[0]);
      fa[1] = pixel_pair(image[1] + at, valid[1]);
      fa[2] = pixel_pair(image[0] + at + 2 * s.width, valid[0]);
      fa[3] = pixel_pair(image[1] + at + 2 * s.width, valid[1]);
      // The cell's filters in this block's range: [f_begin, f_end).
      const std::int64_t cell_first = static_cast<std::int64_t>(cell) * s.filters;
      const int f_begin = static_cast<int>(max(own.first, cell_first) - cell_first);
      const int f_end = static_cast<int>(min(own_end, cell_first + s.filters) - cell_first);
      for (int pair = f_begin / 2; 2 * pair < f_end; ++pair) {
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < kConvWeightParts; ++r) {
          const uint2 fb = fragments[(pair * kConvWeightParts + r) * 32 + lane];
          const std::uint32_t b[2] = {fb.x, fb.y};
          MmaFormat<Precision::kBf16>::mma(d, fa, b);
        }
        float best[2] = {fmaxf(d[0], d[1]), fmaxf(d[2], d[3])};
#pragma unroll
        for (int h = 0; h < 2; ++h) best[h] = fmaxf(best[h], __shfl_xor_sync(kFullWarp, best[h], 1));
        const int f = 2 * pair + (t >> 1);
        if (f >= f_begin && f < f_end) {
          const float bias = smem[l.conv + f * kRow + kTaps1];
          const float* w_fc = smem + l.fc + (cell_first + f - own.first) * kRow + o_first;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float value = fmaxf(fmaf(best[h], kPixelScale, bias), 0.0f);
#pragma unroll
            for (int o = 0; o < 5; ++o) acc[h][o] = fmaf(w_fc[o], value, acc[h][o]);
          }
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int o = 0; o < 5; ++o) acc[h][o] += __shfl_xor_sync(kFullWarp, acc[h][o], 2);
    if (t < 2)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (valid[h]) {
          float* out = a.block_logits + (static_cast<std::int64_t>(blockIdx.x) * s.n + sample[h]) * kO + o_first;
#pragma unroll
          for (int o = 0; o < 5; ++o) out[o] = acc[h][o];
        }
  }
}

}  // namespace cnn::cuda::persistent
