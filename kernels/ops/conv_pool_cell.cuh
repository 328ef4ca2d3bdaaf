// Device helpers shared by the standalone conv+ReLU+pool twin (conv_relu_pool.cu) and the fused
// training step (seed_step.cu). The two must compute bitwise the same pool values and winners, so the
// arithmetic lives here once.
#pragma once

#include "ops/seed_shape.hpp"

namespace cnn::cuda {

// Copies filters [f0, f0 + count) into shared memory as rows of `stride` floats: the C*3*3 taps, then
// the bias, then zero padding up to a whole number of float4s (so a row loads as float4s).
__device__ __forceinline__ void stage_filters(float* w_s /*[count][stride]*/, const float* weight /*[F,taps]*/,
                                              const float* bias /*[F]*/, int f0, int count, int taps, int stride) {
  for (int q = threadIdx.x; q < count * stride; q += blockDim.x) {
    const int f = q / stride;
    const int t = q - f * stride;
    w_s[q] = t < taps ? weight[(f0 + f) * taps + t] : (t == taps ? bias[f0 + f] : 0.0f);
  }
}

// dst[0..N) = src[0..N) through float4 loads; src is 16-byte aligned and N a multiple of 4.
template <int N>
__device__ __forceinline__ void load_float4s(float (&dst)[N], const float* src) {
  static_assert(N % 4 == 0, "whole float4s only");
  const float4* src4 = reinterpret_cast<const float4*>(src);
#pragma unroll
  for (int q = 0; q < N / 4; ++q) {
    const float4 v = src4[q];
    dst[4 * q] = v.x;
    dst[4 * q + 1] = v.y;
    dst[4 * q + 2] = v.z;
    dst[4 * q + 3] = v.w;
  }
}

struct PoolWinner {
  float value;  // the maximum conv output, before the ReLU
  int which;    // a*2 + b of the winning conv position (2py + a, 2px + b)
};

// The four conv outputs under one pool cell from its 4x4 input patch, z[a*2 + b] at conv position
// (2py + a, 2px + b). Each sums bias, then the taps in (c, i, k) order, as the CPU twin does. `w` holds
// one staged filter row (taps, bias at C*3*3).
template <int C, int Stride>
__device__ __forceinline__ void conv_pool_outputs(float (&z)[kPoolWindow * kPoolWindow], const float (&w)[Stride],
                                                  const float (&patch)[C][kPatch][kPatch]) {
  constexpr int kTaps = C * kTaps1;
#pragma unroll
  for (int a = 0; a < kPoolWindow; ++a)
#pragma unroll
    for (int b = 0; b < kPoolWindow; ++b) {
      float sum = w[kTaps];
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int i = 0; i < kSeedKernel; ++i)
#pragma unroll
          for (int k = 0; k < kSeedKernel; ++k)
            sum = fmaf(w[c * kTaps1 + i * kSeedKernel + k], patch[c][a + i][b + k], sum);
      z[a * kPoolWindow + b] = sum;
    }
}

// The four outputs' maximum and where it is: the first maximum in the order a*2+b wins, as on the CPU.
template <int C, int Stride>
__device__ __forceinline__ PoolWinner conv_pool_max(const float (&w)[Stride], const float (&patch)[C][kPatch][kPatch]) {
  float z[kPoolWindow * kPoolWindow];
  conv_pool_outputs<C>(z, w, patch);
  PoolWinner best{z[0], 0};
#pragma unroll
  for (int q = 1; q < kPoolWindow * kPoolWindow; ++q)
    if (z[q] > best.value) best = {z[q], q};
  return best;
}

// The maximum alone (the same value as conv_pool_max's), for a pass that needs no winner: three max
// instructions instead of the winner's compares and selects.
template <int C, int Stride>
__device__ __forceinline__ float conv_pool_value(const float (&w)[Stride], const float (&patch)[C][kPatch][kPatch]) {
  float z[kPoolWindow * kPoolWindow];
  conv_pool_outputs<C>(z, w, patch);
  return fmaxf(fmaxf(z[0], z[1]), fmaxf(z[2], z[3]));
}

}  // namespace cnn::cuda
