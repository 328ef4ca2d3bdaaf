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

// The conv + ReLU + pool of one filter pair for the warp's 16 samples, then their fc terms: d holds
// the pair's mma sums; lanes 4g+t and 4g+(t^1) hold filter 2*pair + t/2's pooled values of samples
// g and g+8 and add outputs o_first..o_first+4 of them into acc.
__device__ __forceinline__ void pooled_fc_terms(float (&acc)[2][5], const float (&d)[4], int pair, int f_begin,
                                                int f_end, std::int64_t column_of_filter0, const float* smem,
                                                const SharedLayout& l, int t, int o_first) {
  float best[2] = {fmaxf(d[0], d[1]), fmaxf(d[2], d[3])};
#pragma unroll
  for (int h = 0; h < 2; ++h) best[h] = fmaxf(best[h], __shfl_xor_sync(kFullWarp, best[h], 1));
  const int f = 2 * pair + (t >> 1);
  if (f < f_begin || f >= f_end) return;
  const float bias = smem[l.conv + f * kRow + kTaps1];
  const float* w_fc = smem + l.fc + (column_of_filter0 + f) * kRow + o_first;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float value = fmaxf(fmaf(best[h], kPixelScale, bias), 0.0f);
#pragma unroll
    for (int o = 0; o < 5; ++o) acc[h][o] = fmaf(w_fc[o], value, acc[h][o]);
  }
}

// The block's filter pairs, cell by cell, as one list: cell c's pairs are [pair_begin, pair_end).
struct CellPairs {
  int cell, f_begin, f_end, pair_begin, pair_end;
  std::int64_t column_of_filter0;  // the block's column index u of (cell, filter 0), possibly negative
};
__device__ __forceinline__ CellPairs cell_pairs(const Shape& s, const Ownership& own, int c) {
  CellPairs p;
  p.cell = own.first_cell + c;
  const std::int64_t cell_first = static_cast<std::int64_t>(p.cell) * s.filters;
  p.f_begin = static_cast<int>(max(own.first, cell_first) - cell_first);
  p.f_end = static_cast<int>(min(own.first + own.count, cell_first + s.filters) - cell_first);
  p.pair_begin = p.f_begin / 2;
  p.pair_end = (p.f_end + 1) / 2;
  p.column_of_filter0 = cell_first - own.first;
  return p;
}

// A. Work items of (16 samples, a slice of the block's filter pairs): one slice where the batch has
// a group of 16 for every warp, else as many as keep the 16 warps busy, their partial logits summed
// in slice order through shared memory. Per cell of the slice, the A fragment (rows g and g+8: the
// group's samples; k 2t..2t+1 and 2t+8..2t+9: patch rows t/2 and t/2+2, columns 2(t%2) and
// 2(t%2)+1, two adjacent bytes) is read once; two filter pairs at a time (two independent chains of
// three mma). Lanes t and t^2 (the pair's two filters) are summed at the end, in that fixed order.
__device__ inline void forward_phase_mma(const SeedPersistentArgs& a, const Shape& s, const Ownership& own, float* smem,
                                         const SharedLayout& l, int step) {
  build_conv_fragments(s, smem, l);
  __syncthreads();
  constexpr int kWarps = kThreads / 32;
  const uint2* fragments = reinterpret_cast<const uint2*>(smem + l.conv_fragments);
  float* slice_logits = smem + l.conv_fragments + conv_fragment_floats(s.filters);  // [items][16][kO]
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int g = lane >> 2, t = lane & 3;
  const int o_first = (t & 1) * 5;
  const std::int64_t step_first = static_cast<std::int64_t>(step) * a.order_stride;
  const int groups = static_cast<int>((s.n + 15) / 16);
  int total_pairs = 0;
  for (int c = 0; c < own.cells; ++c) {
    const CellPairs cp = cell_pairs(s, own, c);
    total_pairs += cp.pair_end - cp.pair_begin;
  }
  int slices = 1;
  while (2 * slices * groups <= kWarps && 2 * slices <= total_pairs) slices *= 2;
  for (int item = warp; item < groups * slices; item += kWarps) {
    const int group = item / slices;
    const int slice = item - group * slices;
    const int first = slice * total_pairs / slices, last = (slice + 1) * total_pairs / slices;
    const std::int64_t sample[2] = {group * 16LL + g, group * 16LL + g + 8};
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
    int offset = 0;  // list position of the cell's first pair
    for (int c = 0; c < own.cells; ++c) {
      const CellPairs cp = cell_pairs(s, own, c);
      const int from = max(first, offset), to = min(last, offset + cp.pair_end - cp.pair_begin);
      const int base = cp.pair_begin - offset;  // pair = base + list position
      offset += cp.pair_end - cp.pair_begin;
      if (from >= to) continue;
      const int py = cp.cell / s.pooled_width;
      const int px = cp.cell - py * s.pooled_width;
      const std::int64_t at =
          static_cast<std::int64_t>(kPoolWindow * py + (t >> 1)) * s.width + kPoolWindow * px + 2 * (t & 1);
      std::uint32_t fa[4];
      fa[0] = pixel_pair(image[0] + at, valid[0]);
      fa[1] = pixel_pair(image[1] + at, valid[1]);
      fa[2] = pixel_pair(image[0] + at + 2 * s.width, valid[0]);
      fa[3] = pixel_pair(image[1] + at + 2 * s.width, valid[1]);
      for (int q = from; q < to; q += 2) {
        const int pair0 = base + q;
        const bool two = q + 1 < to;
        const int pair1 = two ? pair0 + 1 : pair0;
        float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < kConvWeightParts; ++r) {
          const uint2 b0 = fragments[(pair0 * kConvWeightParts + r) * 32 + lane];
          const uint2 b1 = fragments[(pair1 * kConvWeightParts + r) * 32 + lane];
          const std::uint32_t fb0[2] = {b0.x, b0.y}, fb1[2] = {b1.x, b1.y};
          MmaFormat<Precision::kBf16>::mma(d0, fa, fb0);
          MmaFormat<Precision::kBf16>::mma(d1, fa, fb1);
        }
        pooled_fc_terms(acc, d0, pair0, cp.f_begin, cp.f_end, cp.column_of_filter0, smem, l, t, o_first);
        if (two) pooled_fc_terms(acc, d1, pair1, cp.f_begin, cp.f_end, cp.column_of_filter0, smem, l, t, o_first);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int o = 0; o < 5; ++o) acc[h][o] += __shfl_xor_sync(kFullWarp, acc[h][o], 2);
    if (t < 2)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (slices > 1) {
          float* out = slice_logits + (item * 16 + g + 8 * h) * kO + o_first;
#pragma unroll
          for (int o = 0; o < 5; ++o) out[o] = acc[h][o];
        } else if (valid[h]) {
          float* out = a.block_logits + (static_cast<std::int64_t>(blockIdx.x) * s.n + sample[h]) * kO + o_first;
#pragma unroll
          for (int o = 0; o < 5; ++o) out[o] = acc[h][o];
        }
      }
  }
  if (slices > 1) {  // the slices of each sample's logits, in slice order
    __syncthreads();
    for (int e = threadIdx.x; e < s.n * kO; e += kThreads) {
      const int sample = e / kO;
      const int o = e - sample * kO;
      const int group = sample / 16;
      float total = 0.0f;
      for (int slice = 0; slice < slices; ++slice)
        total += slice_logits[((group * slices + slice) * 16 + sample - group * 16) * kO + o];
      a.block_logits[static_cast<std::int64_t>(blockIdx.x) * s.n * kO + e] = total;
    }
  }
}

}  // namespace cnn::cuda::persistent
