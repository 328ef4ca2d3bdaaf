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
// It can also run as two sweeps over the same plan, the fc rows first and the conv rows after
// (SweepRows): each row is the same sum in the same order, so the partial sums are the same bits, and
// the fc gradients are final (and their allreduce can start) while the conv rows are still summed.
//
// What bounds it is the latency of each thread's walk (ncu: most stalls wait on loads), not
// bandwidth: so the windows come from a 16-byte patch per (sample, cell) where the fused forward
// saved one (input_batch.cuh), dL/dlogits from shared memory, several samples' loads are in flight at
// once, and the plan keeps the grid to one wave of the most resident blocks (kernels/bench/NOTES.md).
// At three channels (a layer network's first conv_relu_pool on colour images) the window's 27 pixel
// conversions per (sample, column) bound it instead, and are made without the conversion instruction
// (patch_pixel: a byte permute and one fma); it is then held by instruction issue at two blocks a
// multiprocessor (108 registers; three blocks at 80 registers gained 1-4% of the sweep, not committed).
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/conv_pool_cell.cuh"
#include "cuda/dependent_launch.cuh"
#include "ops/input_batch.cuh"
#include "cuda/launch.hpp"
#include "dist/reduce.cuh"
#include "ops/seed_shape.hpp"
#include "ops/sweep_plan.hpp"

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

// Samples per block-wide staging of dL/dlogits (fused sweep): 128 x 12 floats, 6 KB.
constexpr int kSweepChunk = 128;
constexpr int kLogitStride = 12;  // one sample's 10 dL/dlogits, padded to whole float4s

// What one sweep sums. The fused sweeps all write the same layout of partial sums, [splits, conv rows +
// kSeedClasses, F*P] (the conv rows, then the fc weight gradient's), whichever rows they compute, so
// one finalize serves the fused sweep and the pair that splits it.
enum class SweepRows : int {
  kConvFromGradPooled,  // the twin: g = dL/dpooled is given; the conv rows only, in a layout of its own
  kConvAndFc,           // fused: g from dL/dlogits and W_fc; the conv rows and the fc rows
  kFcOnly,              // fused, first of the pair: the fc rows only (reads pooled and dL/dlogits)
  kConvOnly,            // fused, second of the pair: the conv rows only
};

__host__ __device__ constexpr bool sweep_is_fused(SweepRows rows) { return rows != SweepRows::kConvFromGradPooled; }
__host__ __device__ constexpr bool sweep_sums_conv(SweepRows rows) { return rows != SweepRows::kFcOnly; }
__host__ __device__ constexpr bool sweep_sums_fc(SweepRows rows) {
  return rows == SweepRows::kConvAndFc || rows == SweepRows::kFcOnly;
}
// Rows per split of the partial sums that a sweep writes.
template <int C>
__host__ __device__ constexpr int sweep_layout_rows(SweepRows rows) {
  return conv_grad_rows<C>() + (sweep_is_fused(rows) ? kSeedClasses : 0);
}

// Registers: at one channel the sweep fits 64 (4 blocks of 256 per multiprocessor) without spilling;
// three channels need more. The conv rows alone (fc-first's second pass) are held to 48, so that a
// block of the allreduce running under them (peer_allreduce.cuh) fits beside four of theirs.
template <int C, SweepRows kSums>
__host__ __device__ constexpr int sweep_min_blocks() {
  return C == 1 ? (kSums == SweepRows::kConvOnly ? 5 : 4) : 2;
}

// Rows: see SweepRows. Input: FloatBatch or PatchBatch<C> (input_batch.cuh): where the windows come from.
// One thread per column (gridDim.x x blockDim.x covers F*P), one split of the samples per blockIdx.y.
// The loop has no branches on the data: a cell the ReLU cut (pooled == 0) gets g = 0, which adds
// exactly zero (the pixels are finite and the sums start at +0), so the compiler can overlap the
// loads and sums of several samples; the fused sweep's dL/dlogits come from shared memory.
template <int C, SweepRows kSums, class Input>
__global__ void __launch_bounds__(kBlockThreads, sweep_min_blocks<C, kSums>())
    conv_backward_sweep_kernel(float* __restrict__ partial /*[splits, rows, F*P]*/,
                               const float* __restrict__ grad_pooled /*[n, F*P], twin only*/,
                               const float* __restrict__ grad_logits /*[n, O], fused only*/,
                               const float* __restrict__ fc_weight /*[O, F*P], fused conv rows only*/,
                               const float* __restrict__ pooled /*[n, F*P]*/,
                               const std::uint8_t* __restrict__ argmax /*[n, F*P], conv rows only*/, Input in,
                               SweepShape shape) {
  start_after_previous_kernel();
  constexpr int kO = kSeedClasses;
  constexpr int kConvRows = conv_grad_rows<C>();
  constexpr bool kFused = sweep_is_fused(kSums);
  constexpr bool kConv = sweep_sums_conv(kSums);
  constexpr bool kFc = sweep_sums_fc(kSums);
  constexpr int kRows = sweep_layout_rows<C>(kSums);
  // Written rows: [kFirstRow, kEndRow) of the layout.
  constexpr int kFirstRow = kConv ? 0 : kConvRows;
  constexpr int kEndRow = kFc ? kRows : kConvRows;
  // Loads of this many samples in flight before the first is used; the fc rows alone need few
  // registers per sample, and nothing but loads bounds them.
  constexpr int kUnroll = kConv ? 4 : 8;
  static_assert(kO <= kLogitStride && kLogitStride % 4 == 0, "a sample's dL/dlogits fit whole float4s");
  // Every thread of the block reads the same sample's dL/dlogits at the same time: a broadcast.
  __shared__ __align__(16) float logits_s[kFused ? kSweepChunk * kLogitStride : 4];

  const int P = shape.pooled_height * shape.pooled_width;
  const std::int64_t columns = static_cast<std::int64_t>(shape.filters) * P;
  const std::int64_t plane = static_cast<std::int64_t>(shape.height) * shape.width;
  const std::int64_t s_begin = blockIdx.y * shape.samples_per_split;
  const std::int64_t s_end = min(shape.n, s_begin + shape.samples_per_split);
  const std::int64_t column = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const bool active = column < columns;  // the others only take part in the block's barriers
  const std::int64_t j = active ? column : 0;

  const int cell = static_cast<int>(j % P);
  const int py = cell / shape.pooled_width;
  const int px = cell - py * shape.pooled_width;
  // The cell's 4x4 patch starts at (2py, 2px); the winner (a,b) shifts the 3x3 window by (a,b).
  const PoolCellSite site{cell, static_cast<std::int64_t>(kPoolWindow * py) * shape.width + kPoolWindow * px,
                          shape.width, plane};

  float w_fc[kO];
  if constexpr (kFused && kConv) {
#pragma unroll
    for (int o = 0; o < kO; ++o) w_fc[o] = fc_weight[o * columns + j];
  }
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

  using Prefetch = decltype(in.prefetch(0, site));
  // Sample s, the k-th of the staged chunk.
  auto accumulate = [&](int k, std::int64_t s, float pooled_value, int winner, float grad_pooled_value,
                        const Prefetch& patch) {
    float gl[kLogitStride];
    if constexpr (kFused) load_float4s(gl, logits_s + k * kLogitStride);
    if constexpr (kFc) {
      // The fc weight term: gl * 0 when the ReLU cut the cell.
#pragma unroll
      for (int o = 0; o < kO; ++o) acc[kConvRows + o] = fmaf(gl[o], pooled_value, acc[kConvRows + o]);
    }
    if constexpr (kConv) {
      float g;
      if constexpr (kFused) {
        g = 0.0f;
#pragma unroll
        for (int o = 0; o < kO; ++o) g = fmaf(gl[o], w_fc[o], g);
      } else {
        g = grad_pooled_value;
      }
      // pooled == 0: the ReLU cut it, and no gradient reaches the conv.
      g = pooled_value > 0.0f ? g : 0.0f;
      float x[C][kSeedKernel][kSeedKernel];
      in.template window<C>(x, patch, s, site, winner);
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int i = 0; i < kSeedKernel; ++i)
#pragma unroll
          for (int k2 = 0; k2 < kSeedKernel; ++k2)
            acc[c * kTaps1 + i * kSeedKernel + k2] = fmaf(g, x[c][i][k2], acc[c * kTaps1 + i * kSeedKernel + k2]);
      acc[kConvRows - 1] += g;
    }
  };

  for (std::int64_t chunk = s_begin; chunk < s_end; chunk += kSweepChunk) {
    const int count = static_cast<int>(min(static_cast<std::int64_t>(kSweepChunk), s_end - chunk));
    if constexpr (kFused) {
      __syncthreads();  // the previous chunk's readers are done
      for (int e = threadIdx.x; e < count * kO; e += blockDim.x) {
        const int k = e / kO;
        logits_s[k * kLogitStride + (e - k * kO)] = __ldg(grad_logits + chunk * kO + e);
      }
      __syncthreads();
    }
    if (!active) continue;
    int k = 0;
    for (; k + kUnroll <= count; k += kUnroll) {
      float pv[kUnroll];
      int win[kUnroll];
      float gp[kUnroll];
      Prefetch patch[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t s = chunk + k + u;
        const std::int64_t idx = s * columns + j;
        pv[u] = __ldg(pooled + idx);
        win[u] = kConv ? __ldg(argmax + idx) : 0;
        gp[u] = kFused ? 0.0f : __ldg(grad_pooled + idx);
        if constexpr (kConv) patch[u] = in.prefetch(s, site);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) accumulate(k + u, chunk + k + u, pv[u], win[u], gp[u], patch[u]);
    }
    for (; k < count; ++k) {
      const std::int64_t s = chunk + k;
      const std::int64_t idx = s * columns + j;
      Prefetch patch{};
      if constexpr (kConv) patch = in.prefetch(s, site);
      accumulate(k, s, __ldg(pooled + idx), kConv ? __ldg(argmax + idx) : 0, kFused ? 0.0f : __ldg(grad_pooled + idx),
                 patch);
    }
  }

  if (!active) return;
  float* out = partial + blockIdx.y * static_cast<std::int64_t>(kRows) * columns + j;
#pragma unroll
  for (int r = kFirstRow; r < kEndRow; ++r) out[r * columns] = acc[r];
}

// Resident blocks of one sweep kernel per multiprocessor (for plan_sweep); fixed per binary and GPU.
template <int C, SweepRows kSums, class Input>
int sweep_blocks_per_multiprocessor() {
  static const int blocks =
      resident_blocks_per_multiprocessor(conv_backward_sweep_kernel<C, kSums, Input>, kBlockThreads);
  return blocks;
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
