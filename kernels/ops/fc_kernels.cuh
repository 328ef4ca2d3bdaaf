// Device pieces of the fully connected layer (in [n,K] -> out [n,O], O = 10), shared by the twins in
// fc.cu and the fused training step in seed_step.cu.
//
// Forward: out = in . W^T is a skinny product (K = 169*d is long, O = 10 is short), limited by
// reading `in` once. A warp takes 8 samples and one chunk of K: each weight it loads serves 8
// samples and each input value 10 outputs (80 FMAs per 18 loads), and the warp writes 80 partial sums
// per chunk. A second pass adds the chunks in a fixed order, so there are no atomics and the result
// repeats bit for bit.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "dist/reduce.cuh"
#include "ops/seed_shape.hpp"

namespace cnn::cuda {

constexpr int kFcSamplesPerWarp = 8;
constexpr int kFcForwardThreads = 128;

struct FcForwardPlan {
  std::int64_t chunk = 1024;  // K per warp
  std::int64_t chunks = 1;
  unsigned blocks = 1;
};

// Longest chunk (fewest partial sums to add later) that still gives every multiprocessor a few
// dozen warps. Depends only on the shape and the GPU model.
inline FcForwardPlan plan_fc_forward(std::int64_t n, std::int64_t in_features, int multiprocessors) {
  FcForwardPlan plan;
  const std::int64_t tiles = ceil_div(std::max<std::int64_t>(n, 1), kFcSamplesPerWarp);
  const std::int64_t target_warps = static_cast<std::int64_t>(multiprocessors) * 32;
  plan.chunk = 1024;
  while (plan.chunk > 64 && ceil_div(in_features, plan.chunk) * tiles < target_warps) plan.chunk /= 2;
  plan.chunks = ceil_div(in_features, plan.chunk);
  const std::int64_t warps_per_block = kFcForwardThreads / 32;
  plan.blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(plan.chunks * tiles, warps_per_block), kMaxGridBlocks));
  return plan;
}

// static: this header is included by several translation units.
static __global__ void __launch_bounds__(kFcForwardThreads)
    fc_forward_partial_kernel(float* __restrict__ partial /*[chunks, n, O]*/, const float* __restrict__ in /*[n,K]*/,
                              const float* __restrict__ weight /*[O,K]*/, std::int64_t n, std::int64_t in_features,
                              std::int64_t chunk, std::int64_t chunks) {
  start_after_previous_kernel();
  constexpr int kS = kFcSamplesPerWarp;
  constexpr int kO = kSeedClasses;
  constexpr int kN = kS * kO;
  const unsigned lane = threadIdx.x & 31u;
  const std::int64_t warps_per_block = blockDim.x / 32;
  const std::int64_t tiles = ceil_div_device(n, kS);
  const std::int64_t total = tiles * chunks;
  for (std::int64_t w = blockIdx.x * warps_per_block + threadIdx.x / 32; w < total;
       w += static_cast<std::int64_t>(gridDim.x) * warps_per_block) {
    const std::int64_t tile = w / chunks;
    const std::int64_t c = w - tile * chunks;
    const std::int64_t s0 = tile * kS;
    const std::int64_t k_begin = c * chunk;
    const std::int64_t k_end = min(in_features, k_begin + chunk);
    float acc[kN];
#pragma unroll
    for (int i = 0; i < kN; ++i) acc[i] = 0.0f;
    for (std::int64_t k = k_begin + lane; k < k_end; k += 32) {
      float wv[kO];
#pragma unroll
      for (int o = 0; o < kO; ++o) wv[o] = __ldg(weight + o * in_features + k);
#pragma unroll
      for (int s = 0; s < kS; ++s) {
        const float x = s0 + s < n ? __ldg(in + (s0 + s) * in_features + k) : 0.0f;
#pragma unroll
        for (int o = 0; o < kO; ++o) acc[s * kO + o] = fmaf(wv[o], x, acc[s * kO + o]);
      }
    }
    warp_halving_sum<kN>(acc, lane);
    if ((lane & 1u) == 0) {
      const int base = halving_base<kN>(lane);
#pragma unroll
      for (int i = 0; i < kN / 16; ++i) {
        const int out = base + i;
        const std::int64_t s = s0 + out / kO;
        if (s < n) partial[(c * n + s) * kO + out % kO] = acc[i];
      }
    }
  }
}

// The logits of sample s, computed by one whole warp: lane l adds the partial sums of chunks l,
// l+32, ... in order, then a butterfly over the lanes adds the 32 results. Every lane ends with the
// same bits (each exchange adds the same two numbers on both sides), and the order is fixed by the
// chunk count alone. A warp per sample keeps small batches (few samples, many chunks) from
// serialising on one thread's long loop.
__device__ __forceinline__ void fc_logits_from_partials(float (&z)[kSeedClasses],
                                                        const float* __restrict__ partial /*[chunks, n, O]*/,
                                                        const float* __restrict__ bias /*[O]*/, std::int64_t n,
                                                        std::int64_t chunks, std::int64_t s, unsigned lane) {
  constexpr int kO = kSeedClasses;
#pragma unroll
  for (int o = 0; o < kO; ++o) z[o] = 0.0f;
  for (std::int64_t c = lane; c < chunks; c += 32) {
    const float* row = partial + (c * n + s) * kO;
#pragma unroll
    for (int o = 0; o < kO; ++o) z[o] += row[o];
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
#pragma unroll
    for (int o = 0; o < kO; ++o) z[o] += __shfl_xor_sync(kFullWarp, z[o], offset);
#pragma unroll
  for (int o = 0; o < kO; ++o) z[o] = bias[o] + z[o];
}

// grad_bias[o] (+)= sum_s grad_out[s,o], by one block of kBlockThreads threads, in a fixed order.
__device__ inline void fc_bias_grad_block(float* __restrict__ grad_bias /*[O]*/,
                                          const float* __restrict__ grad_out /*[n,O]*/, std::int64_t n,
                                          bool accumulate) {
  constexpr int kO = kSeedClasses;
  constexpr int kPad = 16;  // block_sum_rows sums multiples of 16
  __shared__ float scratch[kBlockThreads / 32 * kPad];
  float acc[kPad];
#pragma unroll
  for (int o = 0; o < kPad; ++o) acc[o] = 0.0f;
  for (std::int64_t s = threadIdx.x; s < n; s += blockDim.x)
#pragma unroll
    for (int o = 0; o < kO; ++o) acc[o] += grad_out[s * kO + o];
  const float total = block_sum_rows<kPad>(acc, scratch);
  if (threadIdx.x < kO) grad_bias[threadIdx.x] = accumulate ? grad_bias[threadIdx.x] + total : total;
}

// grad_weight[o,j] (+)= sum over splits of partial[split, row0 + o, j], splits in order. Grid-stride
// over the O*K weights by `blocks` blocks, this one being number `block` of them (a kernel may give
// its other blocks other work).
__device__ inline void fc_weight_grad_from_splits(float* __restrict__ grad_weight /*[O,K]*/,
                                                  const float* __restrict__ partial /*[splits, rows, K]*/, int rows,
                                                  int row0, std::int64_t splits, std::int64_t columns,
                                                  std::int64_t block, std::int64_t blocks, bool accumulate) {
  constexpr int kO = kSeedClasses;
  const std::int64_t total = kO * columns;
  for (std::int64_t e = block * blockDim.x + threadIdx.x; e < total; e += blocks * blockDim.x) {
    const std::int64_t o = e / columns;
    const std::int64_t j = e - o * columns;
    float sum = 0.0f;
    for (std::int64_t split = 0; split < splits; ++split) sum += partial[(split * rows + row0 + o) * columns + j];
    grad_weight[e] = accumulate ? grad_weight[e] + sum : sum;
  }
}

}  // namespace cnn::cuda
