// Fixed-order reductions for device code. Every sum here pairs its terms in an order fixed by the
// block size alone, never by timing, so results repeat bit for bit (the reason we avoid float
// atomics: their order of arrival varies from run to run).
#pragma once

#include <cuda_runtime.h>

namespace cnn::cuda {

constexpr unsigned kFullWarp = 0xffffffffu;

// Sum of `value` over the block, valid in thread 0. `scratch` holds blockDim.x elements;
// blockDim.x must be a power of two. A pairwise tree over shared memory.
template <class T>
__device__ T block_sum(T value, T* scratch) {
  const unsigned t = threadIdx.x;
  scratch[t] = value;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) scratch[t] += scratch[t + half];
    __syncthreads();
  }
  const T total = scratch[0];
  __syncthreads();  // scratch may be reused by the caller right away
  return total;
}

// Sums each of N values over the 32 lanes of a warp. At each step a lane keeps the half of its
// values picked by its lane bit and adds the partner's copy of that half, so the warp spends about N
// shuffles instead of the 5N of reducing each value separately. On return lane L holds N/16 sums in
// v[0 .. N/16), covering outputs halving_base<N>(L) + i; lanes L and L^1 hold the same ones.
// One halving step: lanes exchange across `kOffset`; v[0 .. kActive/2) keeps the kept half.
template <int N, int kActive, int kOffset>
__device__ __forceinline__ void warp_halving_step(float (&v)[N], unsigned lane) {
  constexpr int kHalf = kActive / 2;
  const bool upper = (lane & kOffset) != 0;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    const float send = upper ? v[i] : v[i + kHalf];
    const float keep = upper ? v[i + kHalf] : v[i];
    v[i] = keep + __shfl_xor_sync(kFullWarp, send, kOffset);
  }
}

template <int N>
__device__ __forceinline__ void warp_halving_sum(float (&v)[N], unsigned lane) {
  static_assert(N % 16 == 0, "four halvings need N divisible by 16");
  warp_halving_step<N, N, 16>(v, lane);
  warp_halving_step<N, N / 2, 8>(v, lane);
  warp_halving_step<N, N / 4, 4>(v, lane);
  warp_halving_step<N, N / 8, 2>(v, lane);
#pragma unroll
  for (int i = 0; i < N / 16; ++i) v[i] += __shfl_xor_sync(kFullWarp, v[i], 1);
}

template <int N>
__device__ __forceinline__ int halving_base(unsigned lane) {
  return ((lane & 16) ? N / 2 : 0) + ((lane & 8) ? N / 4 : 0) + ((lane & 4) ? N / 8 : 0) +
         ((lane & 2) ? N / 16 : 0);
}

// Sums each of N values (N % 16 == 0) over the block: warp_halving_sum in each warp, then the
// warps' sums in warp order. Thread r < N returns total r (other threads return garbage). One
// barrier pair instead of the log2(blockDim) barriers per value of block_sum. `scratch` holds
// (blockDim.x / 32) * N floats; blockDim.x must be a multiple of 32. The order is fixed by the block
// size alone, so results repeat bit for bit.
template <int N>
__device__ float block_sum_rows(float (&v)[N], float* scratch) {
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x / 32;
  warp_halving_sum<N>(v, lane);
  if ((lane & 1u) == 0) {
    const int base = halving_base<N>(lane);
#pragma unroll
    for (int i = 0; i < N / 16; ++i) scratch[warp * N + base + i] = v[i];
  }
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x < N)
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += scratch[w * N + threadIdx.x];
  __syncthreads();  // scratch may be reused by the caller right away
  return total;
}

// Sum of `value` over the block, valid in thread 0: a butterfly in each warp, then the warps in
// order. scratch holds blockDim.x / 32 elements; blockDim.x a multiple of 32.
template <class T>
__device__ T block_sum_shuffle(T value, T* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(kFullWarp, value, offset);
  if ((threadIdx.x & 31u) == 0) scratch[threadIdx.x / 32] = value;
  __syncthreads();
  T total = T(0);
  if (threadIdx.x == 0)
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

}  // namespace cnn::cuda
