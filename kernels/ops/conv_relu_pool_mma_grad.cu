// The weight gradient of the first layer's conv3x3 + ReLU + 2x2 max-pool on tensor cores
// (layer_ops.hpp, conv_relu_pool_backward_weights_mma; the layouts: conv_relu_pool_mma.cu):
//   M = (f,p) of a group of 8 filters, N = the 16C patch pixels (c,u,v), K = pool cells in chunks of 16
//   of one sample; A[(f,p)][cell] = dL/dpooled where p won and the ReLU did not cut the cell, else 0,
//   B = the forward's saved patches; then dW[f,c,i,k] = sum over p = a*2+b of D[(f,p)][(c,a+i,b+k)].
// Blocks take a fixed split of the chunks and write one record of partial sums each; the finalize
// adds the records in split order. No float atomics: the same bits on a rerun.
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "dist/reduce.cuh"
#include "ops/conv_relu_pool_mma.cuh"
#include "ops/cuda_ops.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {
namespace {

using namespace cell_mma;  // NOLINT: the shared constants and helpers of the tensor-core forms

// Block = (split, filter group of 8), its warps taking the split's chunks (16 cells of one sample) in
// turn. Per chunk, thread (g, q) reads its 4 cells: the patches (B: pixel n = 8t + g of n tile t) and,
// for filter 4m + (g&3) of each m tile m, dL/dpooled and the winner (A rows g and g+8: outputs
// 2(g/4) and 2(g/4) + 1). The lanes with g < 4 also sum dL/dpooled in fp32 for the bias. The warps'
// sums are added in warp order and written as the block's record of the partial sums.
template <Precision P, int C>
__global__ void __launch_bounds__(kThreads)
    conv_relu_pool_mma_grad_kernel(float* __restrict__ partial /*[splits][groups][record]*/,
                                   const float* __restrict__ grad_pooled /*[n,F,P]*/,
                                   const std::uint8_t* __restrict__ winners /*[n,F,P]*/,
                                   const uint4* __restrict__ patches /*[n,C,P]*/, std::int64_t n, int filters,
                                   int cells, int chunks_per_sample, std::int64_t chunks_per_split, int groups) {
  start_after_previous_kernel();
  using Format = MmaFormat<P>;
  constexpr int kPerWord = Format::kPerWord;
  constexpr int kSteps = kTileCells / step_k<P>();
  constexpr int kN = 2 * C;  // n tiles: 8 of the 16 pixels of a channel each
  constexpr int kRecord = grad_record<C>();
  __shared__ float sums_s[kWarps][kRecord];

  const int group = static_cast<int>(blockIdx.x % groups);
  const std::int64_t split = blockIdx.x / groups;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int first = 2 * (g >> 2);  // outputs p of rows g and g+8: first, first + 1
  float acc[kGradTiles][kN][4];
  float bias_acc[kGradTiles];
#pragma unroll
  for (int m = 0; m < kGradTiles; ++m) {
    bias_acc[m] = 0.0f;
#pragma unroll
    for (int t = 0; t < kN; ++t)
#pragma unroll
      for (int h = 0; h < 4; ++h) acc[m][t][h] = 0.0f;
  }

  const std::int64_t begin = split * chunks_per_split;
  const std::int64_t end = min(n * chunks_per_sample, begin + chunks_per_split);
  for (std::int64_t chunk = begin + warp; chunk < end; chunk += kWarps) {
    const std::int64_t s = chunk / chunks_per_sample;
    const int cell0 = static_cast<int>(chunk - s * chunks_per_sample) * kTileCells;
    float av[kSteps][kGradTiles][2][2][2];  // [step][m][row half][k half][element]
    float bv[kSteps][kN][2][2];             // [step][n tile][k half][element]
#pragma unroll
    for (int step = 0; step < kSteps; ++step)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (e >= kPerWord) continue;
          const int cell = cell0 + step * step_k<P>() + fragment_k<P>(q, half, e);
          const bool valid = cell < cells;
          // Every load is in bounds and unconditional (past the last cell: cell 0, and the last filter),
          // so that all of the chunk's loads are in flight at once; a cell or filter past the end gets
          // A = 0, which zeroes whatever B holds for it.
          const int at = valid ? cell : 0;
#pragma unroll
          for (int c = 0; c < C; ++c) {
            // Pixel 8*(t&1) + g of n tile t = 2c + (t&1): byte g%4 of row 2*(t&1) + g/4, the only two of
            // the patch's four row words this thread reads.
            const unsigned* rows = reinterpret_cast<const unsigned*>(patches + (s * C + c) * cells + at);
            bv[step][2 * c][half][e] = byte_value(__ldg(rows + (g >> 2)), g & 3);
            bv[step][2 * c + 1][half][e] = byte_value(__ldg(rows + 2 + (g >> 2)), g & 3);
          }
#pragma unroll
          for (int m = 0; m < kGradTiles; ++m) {
            const int f = group * kGradFilters + 4 * m + (g & 3);
            const std::int64_t o = (s * filters + min(f, filters - 1)) * cells + at;
            const unsigned won = __ldg(winners + o);
            const float raw = __ldg(grad_pooled + o);
            // Where the ReLU cut the cell, no gradient (and a NaN there is dropped, as in fp32).
            const float grad = valid && f < filters && (won & kReluCutBit) == 0 ? raw : 0.0f;
            if (g < 4) bias_acc[m] += grad;
            av[step][m][0][half][e] = (won & 3u) == static_cast<unsigned>(first) ? grad : 0.0f;
            av[step][m][1][half][e] = (won & 3u) == static_cast<unsigned>(first + 1) ? grad : 0.0f;
          }
        }
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      std::uint32_t b[kN][2];
#pragma unroll
      for (int t = 0; t < kN; ++t)
#pragma unroll
        for (int r = 0; r < 2; ++r) b[t][r] = Format::pack(bv[step][t][r][0], bv[step][t][r][kPerWord - 1]);
#pragma unroll
      for (int m = 0; m < kGradTiles; ++m) {
        std::uint32_t a[4];
#pragma unroll
        for (int r = 0; r < 4; ++r)
          a[r] = Format::pack(av[step][m][r & 1][r >> 1][0], av[step][m][r & 1][r >> 1][kPerWord - 1]);
#pragma unroll
        for (int t = 0; t < kN; ++t) Format::mma(acc[m][t], a, b[t]);
      }
    }
  }

  // The warp's sums into shared memory: [filter][output p][pixel], then the bias sums (lanes q = 0
  // of g < 4, after adding the four q in a fixed order).
  float* mine = sums_s[warp];
#pragma unroll
  for (int m = 0; m < kGradTiles; ++m) {
#pragma unroll
    for (int t = 0; t < kN; ++t)
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const int row = (4 * m + (g & 3)) * kCellOutputs + first + (h >> 1);
        mine[row * C * kPatchPixels + 8 * t + 2 * q + (h & 1)] = acc[m][t][h];
      }
    float b = bias_acc[m];
    b += __shfl_xor_sync(kFullWarp, b, 1);
    b += __shfl_xor_sync(kFullWarp, b, 2);
    if (g < 4 && q == 0) mine[kGradFilters * kCellOutputs * C * kPatchPixels + 4 * m + g] = b;
  }
  __syncthreads();
  float* out = partial + (split * groups + group) * kRecord;
  for (int i = threadIdx.x; i < kRecord; i += kThreads) {
    float sum = sums_s[0][i];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) sum += sums_s[w][i];
    out[i] = sum;
  }
}

// A block per (row, filter), row = a tap (c,i,k) or (last) the bias: adds the splits' records in a
// fixed order (a strided run per thread, then the warps in order), and for a tap the four outputs p
// of each record: dW[f,c,i,k] = sum over p = a*2+b of D[(f,p)][(c, a+i, b+k)].
template <int C>
__global__ void __launch_bounds__(kThreads)
    conv_relu_pool_mma_grad_finalize_kernel(float* __restrict__ grad_weight /*[F,C,3,3]*/,
                                            float* __restrict__ grad_bias /*[F]*/,
                                            const float* __restrict__ partial, std::int64_t splits, int groups,
                                            bool accumulate) {
  start_after_previous_kernel();
  constexpr int kTaps = C * kTaps1;
  constexpr int kRecord = grad_record<C>();
  __shared__ float scratch[kWarps];
  const int row = static_cast<int>(blockIdx.x);
  const int f = static_cast<int>(blockIdx.y);
  const int fl = f % kGradFilters;
  const float* records = partial + (f / kGradFilters) * kRecord;
  const int c = row / kTaps1, i = row % kTaps1 / kSeedKernel, k = row % kSeedKernel;
  float acc = 0.0f;
  for (std::int64_t split = threadIdx.x; split < splits; split += kThreads) {
    const float* record = records + split * groups * kRecord;
    if (row < kTaps) {
#pragma unroll
      for (int p = 0; p < kCellOutputs; ++p)
        acc += __ldg(record + (fl * kCellOutputs + p) * C * kPatchPixels + c * kPatchPixels +
                     (p / kPoolWindow + i) * kPatch + p % kPoolWindow + k);
    } else {
      acc += __ldg(record + kGradFilters * kCellOutputs * C * kPatchPixels + fl);
    }
  }
  const float total = block_sum_shuffle(acc, scratch);
  if (threadIdx.x == 0) {
    float* dst = row < kTaps ? grad_weight + static_cast<std::int64_t>(f) * kTaps + row : grad_bias + f;
    *dst = accumulate ? *dst + total : total;
  }
}

template <Precision P, int C>
void grad_for(const ConvReluPoolMmaPlan& plan, float* grad_weight, float* grad_bias, const float* grad_pooled,
              const std::uint8_t* winners, const uint4* patches, std::int64_t n, const SeedModel& m, bool accumulate,
              float* workspace, cudaStream_t stream) {
  const int cells = m.pooled().height * m.pooled().width;
  launch_dependent(conv_relu_pool_mma_grad_kernel<P, C>,
                   dim3(static_cast<unsigned>(plan.splits * plan.grad_groups)), kThreads, 0, stream, workspace,
                   grad_pooled, winners, patches, n, m.filters, cells, plan.chunks_per_sample, plan.chunks_per_split,
                   plan.grad_groups);
  CNN_CHECK_LAUNCH();
  launch_dependent(conv_relu_pool_mma_grad_finalize_kernel<C>,
                   dim3(C * kTaps1 + 1, static_cast<unsigned>(m.filters)), kThreads, 0, stream, grad_weight, grad_bias,
                   static_cast<const float*>(workspace), plan.splits, plan.grad_groups, accumulate);
  CNN_CHECK_LAUNCH();
}

}  // namespace

int cell_mma::grad_blocks_per_multiprocessor(Precision precision, int channels) {
  int blocks = 0;
  dispatch(precision, channels, [&](auto p, auto c) {
    static const int resident =
        resident_blocks_per_multiprocessor(conv_relu_pool_mma_grad_kernel<decltype(p)::value, decltype(c)::value>,
                                           kThreads);
    blocks = resident;
  });
  return blocks;
}

void conv_relu_pool_backward_weights_mma(const ConvReluPoolMmaPlan& plan, float* grad_weight, float* grad_bias,
                                         const float* grad_pooled, const std::uint8_t* winners, const uint4* patches,
                                         std::int64_t n, const SeedModel& m, bool accumulate, float* workspace,
                                         cudaStream_t stream) {
  check_seed_shape(m);
  if (n <= 0) return;
  dispatch(plan.precision, m.input.channels, [&](auto p, auto c) {
    grad_for<decltype(p)::value, decltype(c)::value>(plan, grad_weight, grad_bias, grad_pooled, winners, patches, n,
                                                     m, accumulate, workspace, stream);
  });
}

}  // namespace cnn::cuda
