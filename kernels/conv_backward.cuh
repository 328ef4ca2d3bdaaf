// The column sweep behind the conv layer's backward pass, shared by the twin of
// conv_relu_pool_backward (conv_relu_pool.cu) and the fused backward of one training step
// (seed_step.cu).
//
// Layout: the pooled activations are a matrix [n, F*P] (P = PH*PW pool cells). Thread j owns
// column j = f*P + cell and walks down a split of the samples, so every per-column sum (the fc
// weight gradient of that column, and this column's share of filter f's gradient) is a plain
// register sum in sample order, and each warp's loads of row s are contiguous. Each split writes its
// sums to a partial buffer [splits, rows, F*P]; a second kernel adds the splits (and, per filter,
// the P cells) in a fixed order. No atomics, so results repeat bit for bit.
//
// Gradient formulas (L = loss summed over the batch, z = conv output before ReLU and pooling):
//   dL/dz[s,f,y,x] = g[s,f,cell] at the pool winner (y,x) of `cell` when pooled > 0, else 0
//   dL/dW_conv[f,c,i,k] = sum_{s,cell} g * in[s, c, y+i, x+k]  with (y,x) the winner of cell
//   dL/db_conv[f]       = sum_{s,cell} g
// where g = dL/dpooled, given (twin) or, fused, computed from the logits' gradient as
//   g[s,f,cell] = sum_o dL/dlogit[s,o] * W_fc[o, f*P+cell]
// so the [n, F*P] matrix of g is never written to memory. The fused sweep also sums the fc weight
// gradient dL/dW_fc[o,j] = sum_s dL/dlogit[s,o] * pooled[s,j], which needs the same pooled value.
#pragma once

#include <cstdint>

#include "input_batch.cuh"
#include "launch.hpp"
#include "reduce.cuh"
#include "seed_shape.hpp"

namespace cnn::cuda {

// Weight taps and the bias of one filter: the first rows of each split's block of partial sums.
template <int C>
__host__ __device__ constexpr int conv_grad_rows() {
  return C * kTaps1 + 1;
}

struct SweepShape {
  std::int64_t n = 0;                  // samples
  std::int64_t samples_per_split = 0;  // gridDim.y splits cover n
  int filters = 0;
  int height = 0;  // input H, W
  int width = 0;
  int pooled_height = 0;
  int pooled_width = 0;
};

// How the samples are split: enough blocks to fill the GPU a few times over, and as few splits
// as that allows, because each split costs a partial row of every column. Depends only on the
// shape and the GPU model, so the summation order is the same on every run.
struct SweepPlan {
  unsigned column_blocks = 1;
  std::int64_t splits = 1;
  std::int64_t samples_per_split = 1;
};

constexpr int kSweepBlocksPerMultiprocessor = 3;
constexpr std::int64_t kMinSamplesPerSplit = 16;

inline SweepPlan plan_sweep(std::int64_t n, std::int64_t columns, int multiprocessors) {
  SweepPlan plan;
  plan.column_blocks = static_cast<unsigned>(ceil_div(columns, kBlockThreads));
  const std::int64_t target = static_cast<std::int64_t>(kSweepBlocksPerMultiprocessor) * multiprocessors;
  // Each split writes `rows` (about 20) partial values per column, where the batch has n: beyond n/16
  // splits the partial sums would cost more memory traffic than the activations they summarise.
  const std::int64_t most = std::max<std::int64_t>(n / kMinSamplesPerSplit, 1);
  std::int64_t splits = std::clamp<std::int64_t>(ceil_div(target, plan.column_blocks), 1, most);
  splits = std::min<std::int64_t>(splits, 65535);
  plan.samples_per_split = ceil_div(std::max<std::int64_t>(n, 1), splits);
  plan.splits = ceil_div(std::max<std::int64_t>(n, 1), plan.samples_per_split);
  return plan;
}

// kFused = false: g comes from grad_pooled (the twin). kFused = true: g is computed from
// grad_logits and fc_weight, and the fc weight gradient rows follow the conv rows.
// Input: FloatBatch or GatheredBatch (input_batch.cuh), the [n, C, H, W] input pixels.
template <int C, bool kFused, class Input>
__global__ void __launch_bounds__(kBlockThreads)
    conv_backward_sweep_kernel(float* __restrict__ partial /*[splits, rows, F*P]*/,
                               const float* __restrict__ grad_pooled /*[n, F*P], twin only*/,
                               const float* __restrict__ grad_logits /*[n, O], fused only*/,
                               const float* __restrict__ fc_weight /*[O, F*P], fused only*/,
                               const float* __restrict__ pooled /*[n, F*P]*/,
                               const std::uint8_t* __restrict__ argmax /*[n, F*P]*/, Input in, SweepShape shape) {
  constexpr int kO = kSeedClasses;
  constexpr int kConvRows = conv_grad_rows<C>();
  constexpr int kRows = kConvRows + (kFused ? kO : 0);
  constexpr int kUnroll = 4;  // loads of 4 samples in flight before the first is used

  const int P = shape.pooled_height * shape.pooled_width;
  const std::int64_t columns = static_cast<std::int64_t>(shape.filters) * P;
  const std::int64_t plane = static_cast<std::int64_t>(shape.height) * shape.width;
  const std::int64_t s_begin = blockIdx.y * shape.samples_per_split;
  const std::int64_t s_end = min(shape.n, s_begin + shape.samples_per_split);

  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < columns;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int cell = static_cast<int>(j % P);
    const int py = cell / shape.pooled_width;
    const int px = cell - py * shape.pooled_width;
    // Top-left input pixel of this cell's 4x4 patch; the winner (a,b) shifts the 3x3 window by (a,b).
    const std::int64_t patch_origin = static_cast<std::int64_t>(kPoolWindow * py) * shape.width + kPoolWindow * px;

    float w_fc[kO];
    if constexpr (kFused) {
#pragma unroll
      for (int o = 0; o < kO; ++o) w_fc[o] = fc_weight[o * columns + j];
    }
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

    auto accumulate = [&](std::int64_t s, float pooled_value, int winner, float grad_pooled_value) {
      float g;
      if constexpr (kFused) {
        const float* go = grad_logits + s * kO;
        float gl[kO];
#pragma unroll
        for (int o = 0; o < kO; ++o) gl[o] = go[o];
        g = 0.0f;
#pragma unroll
        for (int o = 0; o < kO; ++o) g = fmaf(gl[o], w_fc[o], g);
#pragma unroll
        for (int o = 0; o < kO; ++o) acc[kConvRows + o] = fmaf(gl[o], pooled_value, acc[kConvRows + o]);
      } else {
        g = grad_pooled_value;
      }
      const auto pixels = in.sample(s);
      const std::int64_t window = patch_origin + (winner >> 1) * shape.width + (winner & 1);
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int i = 0; i < kSeedKernel; ++i)
#pragma unroll
          for (int k = 0; k < kSeedKernel; ++k)
            acc[c * kTaps1 + i * kSeedKernel + k] =
                fmaf(g, pixels[window + c * plane + i * shape.width + k], acc[c * kTaps1 + i * kSeedKernel + k]);
      acc[kConvRows - 1] += g;
    };

    std::int64_t s = s_begin;
    for (; s + kUnroll <= s_end; s += kUnroll) {
      float pv[kUnroll];
      int win[kUnroll];
      float gp[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t idx = (s + u) * columns + j;
        pv[u] = __ldg(pooled + idx);
        win[u] = __ldg(argmax + idx);
        gp[u] = kFused ? 0.0f : __ldg(grad_pooled + idx);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        // pooled == 0 means the ReLU cut it: no gradient reaches the conv, and the fc weight term
        // g_logit * 0 vanishes too.
        if (pv[u] > 0.0f) accumulate(s + u, pv[u], win[u], gp[u]);
    }
    for (; s < s_end; ++s) {
      const std::int64_t idx = s * columns + j;
      const float pv = __ldg(pooled + idx);
      if (pv > 0.0f) accumulate(s, pv, __ldg(argmax + idx), kFused ? 0.0f : __ldg(grad_pooled + idx));
    }

    float* out = partial + blockIdx.y * static_cast<std::int64_t>(kRows) * columns + j;
#pragma unroll
    for (int r = 0; r < kRows; ++r) out[r * columns] = acc[r];
  }
}

// One block per filter f: sums the conv rows of the partial buffer over splits and pool cells,
// in a fixed order (each thread a strided run, then block_sum_rows), and writes (or adds to) the
// filter's weight and bias gradients. blockDim.x must be kBlockThreads.
template <int C>
__device__ void conv_grad_finalize_block(float* __restrict__ grad_weight /*[F, C*9]*/,
                                         float* __restrict__ grad_bias /*[F]*/,
                                         const float* __restrict__ partial /*[splits, rows, F*P]*/, int rows,
                                         std::int64_t splits, int filters, int P, int f, bool accumulate) {
  constexpr int kConvRows = conv_grad_rows<C>();
  constexpr int kPad = (kConvRows + 15) / 16 * 16;  // block_sum_rows sums multiples of 16
  __shared__ float scratch[kBlockThreads / 32 * kPad];
  const std::int64_t columns = static_cast<std::int64_t>(filters) * P;
  float acc[kPad];
#pragma unroll
  for (int r = 0; r < kPad; ++r) acc[r] = 0.0f;
  const std::int64_t items = splits * P;
  for (std::int64_t e = threadIdx.x; e < items; e += blockDim.x) {
    const std::int64_t split = e / P;
    const std::int64_t cell = e - split * P;
    const float* src = partial + split * rows * columns + static_cast<std::int64_t>(f) * P + cell;
#pragma unroll
    for (int r = 0; r < kConvRows; ++r) acc[r] += src[r * columns];
  }
  const float total = block_sum_rows<kPad>(acc, scratch);
  const int r = static_cast<int>(threadIdx.x);
  if (r < kConvRows) {
    float* dst = r < kConvRows - 1 ? grad_weight + static_cast<std::int64_t>(f) * (kConvRows - 1) + r : grad_bias + f;
    *dst = accumulate ? *dst + total : total;
  }
}

}  // namespace cnn::cuda
