// What the tensor-core forms of conv_relu_pool share: the forward and the plan (conv_relu_pool_mma.cu)
// and the weight gradient (conv_relu_pool_mma_grad.cu); layer_ops.hpp declares them. The products'
// layouts are described in conv_relu_pool_mma.cu.
#pragma once

#include <type_traits>

#include "cnn/choices.hpp"
#include "ops/mma_instructions.cuh"
#include "ops/seed_shape.hpp"

namespace cnn::cuda::cell_mma {

constexpr int kPatchPixels = kPatch * kPatch;          // 16: k (forward) or n (weight grad) per channel
constexpr int kCellOutputs = kPoolWindow * kPoolWindow;  // 4 conv outputs under a pool cell
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Forward: a block's filters; its staged weights are 16 n tiles of 8 columns (2 filters x 4 outputs).
constexpr int kForwardFilters = 32;
constexpr int kForwardTiles = kForwardFilters * kCellOutputs / 8;
constexpr int kTileCells = 16;  // the forward's m tile, the weight gradient's chunk of k
// Weight gradient: a block's filters (2 m tiles of 16 rows (f,p)).
constexpr int kGradFilters = 8;
constexpr int kGradTiles = kGradFilters * kCellOutputs / 16;

template <Precision P>
__host__ __device__ constexpr int step_k() {
  return 8 * MmaFormat<P>::kPerWord;  // k of one mma: 8 (tf32) or 16 (bf16)
}
template <Precision P, int C>
__host__ __device__ constexpr int forward_steps() {
  return C * kPatchPixels / step_k<P>();
}
// One (split, group) record of the weight gradient's partial sums: [8 filters][4 outputs][16C pixels],
// then the 8 filters' bias sums.
template <int C>
__host__ __device__ constexpr int grad_record() {
  return kGradFilters * kCellOutputs * kPatchPixels * C + kGradFilters;
}

// Byte `which` (0..3) of `word` as an exact float: 2^23 + byte, built by one byte permute, minus 2^23.
__device__ __forceinline__ float byte_value(unsigned word, unsigned which) {
  return __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7440u | which)) - 8388608.0f;
}

// The fragment layouts of mma.m16n8k8 (tf32) and m16n8k16 (bf16), for lane (g = lane/4, q = lane%4):
// register r of A holds row g + 8*(r&1), k = kPerWord*q + e + 4*kPerWord*(r>>1) for its elements e;
// register r of B holds column g, k = kPerWord*q + e + 4*kPerWord*r; accumulator h holds row
// g + 8*(h>>1), column 2q + (h&1).
template <Precision P>
__device__ __forceinline__ int fragment_k(int q, int half, int e) {
  constexpr int kPerWord = MmaFormat<P>::kPerWord;
  return kPerWord * q + e + 4 * kPerWord * half;
}

// f(precision, channels) as compile-time constants (std::integral_constant) for the kernels' templates.
template <class F>
void dispatch(Precision precision, int channels, F&& f) {
  using Tf32 = std::integral_constant<Precision, Precision::kTf32>;
  using Bf16 = std::integral_constant<Precision, Precision::kBf16>;
  using One = std::integral_constant<int, 1>;
  using Three = std::integral_constant<int, 3>;
  if (precision == Precision::kBf16)
    channels == 1 ? f(Bf16{}, One{}) : f(Bf16{}, Three{});
  else
    channels == 1 ? f(Tf32{}, One{}) : f(Tf32{}, Three{});
}

// Resident blocks of the forward and weight-gradient kernels per multiprocessor, for the plan.
int forward_blocks_per_multiprocessor(Precision precision, int channels);
int grad_blocks_per_multiprocessor(Precision precision, int channels);

}  // namespace cnn::cuda::cell_mma
