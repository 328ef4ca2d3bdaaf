// The first layer's conv3x3 + ReLU + 2x2/2 max-pool on tensor cores, for --precision tf32 and bf16
// (layer_ops.hpp, conv_relu_pool_forward_from_data_mma and conv_relu_pool_backward_weights_mma): the
// mma.sync forms of conv_relu_pool.cu's forward from the uint8 data set and of its weight gradient
// from the saved patches. uint8 pixels are exact in tf32 and bf16, so the products round only the
// weights (forward) or dL/dpooled (weight gradient), as the staged products do (MmaFormat::pack), and
// the pixel scale (kPixelScale) is applied to the fp32 sums.
//
// Both products take k or n over the 16 pixels (u,v) of a pool cell's 4x4 input patch per channel,
// so an operand row is the cell's saved patch word itself, and put the cell's 4 conv outputs
// p = a*2+b side by side with the filters (column f*4 + p):
//   forward      M = cells (s,cell)   N = (f,p) of a group of 32 filters   K = (c,u,v), 16C
//                B[(c,u,v)][(f,p)] = w[f,c,u-a,v-b] inside the 3x3 window, else 0; the 4 outputs of
//                a cell sit in 4 adjacent columns of one thread and its neighbour (lane ^ 1), so the
//                pool's max and winner take one shuffle.
//   weight grad  M = (f,p) of a group of 8 filters   N = (c,u,v)   K = cells of 16 per sample
//                A[(f,p)][cell] = dL/dpooled where p won and the ReLU did not cut the cell, else 0;
//                then dW[f,c,i,k] = sum over p of D[(f,p)][(c,a+i,b+k)] (the finalize).
// Three quarters of each product's terms are zeros, which costs nothing that matters: the forward is
// bound by its stores of pooled and winners, the weight gradient by its loads of dL/dpooled.
//
// The forward's winner byte is a*2+b as in the fp32 kernel (the first maximum in that order), plus
// kReluCutBit where the ReLU cut the cell (pooled == 0), so that the weight gradient need not read
// the pooled output. Every sum runs in an order fixed by the plan: no float atomics.
#include <algorithm>
#include <string>

#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "dist/reduce.cuh"
#include "ops/cuda_ops.hpp"
#include "ops/input_batch.cuh"
#include "ops/layer_ops.hpp"
#include "ops/mma_instructions.cuh"

namespace cnn::cuda {
namespace {

constexpr int kPatchPixels = kPatch * kPatch;          // 16: k (forward) or n (weight grad) per channel
constexpr int kCellOutputs = kPoolWindow * kPoolWindow;  // 4 conv outputs under a pool cell
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr unsigned kFullWarp = 0xffffffffu;
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

// ---- forward --------------------------------------------------------------------------------------

// The forward's B for every group of 32 filters, in fragment order [group][n tile][k step][lane][2]:
// B[(c,u,v)][(f,p)] = w[f,c,u-a,v-b] (p = a*2+b) inside the window, 0 outside it and past the filters.
template <Precision P, int C>
__global__ void stage_forward_weights_kernel(std::uint32_t* __restrict__ fragments, const float* __restrict__ weight,
                                             int filters, int words) {
  start_after_previous_kernel();
  constexpr int kSteps = forward_steps<P, C>();
  for (int w = blockIdx.x * blockDim.x + threadIdx.x; w < words; w += gridDim.x * blockDim.x) {
    const int r = w & 1;
    const int lane = (w >> 1) & 31;
    int rest = w >> 6;
    const int step = rest % kSteps;
    rest /= kSteps;
    const int column = (rest % kForwardTiles) * 8 + (lane >> 2);
    const int f = (rest / kForwardTiles) * kForwardFilters + column / kCellOutputs;
    const int p = column % kCellOutputs;
    float v[2] = {0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < MmaFormat<P>::kPerWord; ++e) {
      const int k = step * step_k<P>() + fragment_k<P>(lane & 3, r, e);
      const int c = k / kPatchPixels;
      const int i = (k / kPatch) % kPatch - p / kPoolWindow;
      const int j = k % kPatch - p % kPoolWindow;
      if (f < filters && i >= 0 && i < kSeedKernel && j >= 0 && j < kSeedKernel)
        v[e] = __ldg(weight + ((f * C + c) * kSeedKernel + i) * kSeedKernel + j);
    }
    fragments[w] = MmaFormat<P>::pack(v[0], v[1]);
  }
}

// A warp per m tile of 16 cells (grid-stride), all n tiles of the block's filter group. Its lanes
// read the tile's patches (as read_byte_patch, into shared memory), filter group 0 saves them; each
// thread then holds its A fragments for every k step, and runs through the n tiles: mma over k, then
// the pool. Thread (g, q) of n tile t holds outputs p = 2(q&1) + {0,1} of filter 2t + q/2 for cells
// g and g+8: it keeps the better of its two for cell g (q even) or g+8 (q odd), swaps the other with
// lane ^ 1, and the lower pair wins ties (the first maximum in the order a*2+b).
template <Precision P, int C>
__global__ void __launch_bounds__(kThreads)
    conv_relu_pool_mma_forward_kernel(float* __restrict__ pooled /*[n,F,PH,PW]*/,
                                      std::uint8_t* __restrict__ winners /*[n,F,PH,PW]*/,
                                      uint4* __restrict__ patches /*[n,C,P] or null*/, GatheredBatch in,
                                      const std::uint32_t* __restrict__ fragments, const float* __restrict__ bias,
                                      std::int64_t n, int filters, int height, int width, int pooled_width, int cells) {
  start_after_previous_kernel();
  using Format = MmaFormat<P>;
  constexpr int kSteps = forward_steps<P, C>();
  __shared__ __align__(16) uint2 b_s[kForwardTiles * kSteps * 32];  // [n tile][k step][lane]
  __shared__ float bias_s[kForwardFilters];
  __shared__ __align__(16) unsigned patch_s[kWarps][kTileCells][C][kPatch];  // row u of a patch: 4 bytes

  const int group = static_cast<int>(blockIdx.y);
  const int f0 = group * kForwardFilters;
  {
    const uint4* src = reinterpret_cast<const uint4*>(fragments) + group * (kForwardTiles * kSteps * 16);
    uint4* dst = reinterpret_cast<uint4*>(b_s);
    for (int i = threadIdx.x; i < kForwardTiles * kSteps * 16; i += kThreads) dst[i] = __ldg(src + i);
    for (int i = threadIdx.x; i < kForwardFilters; i += kThreads)
      bias_s[i] = f0 + i < filters ? __ldg(bias + f0 + i) : 0.0f;
  }
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const std::int64_t plane = static_cast<std::int64_t>(height) * width;
  const std::int64_t total = n * cells;
  const std::int64_t tiles = ceil_div_device(total, kTileCells);
  const bool odd = (q & 1) != 0;
  unsigned(*patch)[C][kPatch] = patch_s[warp];
  for (std::int64_t tile = blockIdx.x * std::int64_t{kWarps} + warp; tile < tiles;
       tile += std::int64_t{gridDim.x} * kWarps) {
    __syncwarp();  // the previous tile's reads of patch_s are done
    {
      // Lane: cell lane % 16, rows 2*(lane / 16) and the next.
      const int local = lane & (kTileCells - 1);
      const std::int64_t e = tile * kTileCells + local;
      const bool valid = e < total;
      const std::int64_t s = valid ? e / cells : 0;
      const int cell = static_cast<int>(e - s * cells);
      const int py = valid ? cell / pooled_width : 0;
      const int px = valid ? cell - py * pooled_width : 0;
      const std::uint8_t* pixels = in.sample(s).pixels + static_cast<std::int64_t>(kPoolWindow * py) * width +
                                   kPoolWindow * px;
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int du = 0; du < 2; ++du) {
          const int u = 2 * (lane >> 4) + du;
          unsigned row = 0;
#pragma unroll
          for (int v = 0; v < kPatch; ++v)
            row |= (valid ? static_cast<unsigned>(__ldg(pixels + c * plane + u * width + v)) : 0u) << (8 * v);
          patch[local][c][u] = row;
        }
      __syncwarp();
      if (patches != nullptr && group == 0 && lane < kTileCells && valid)
#pragma unroll
        for (int c = 0; c < C; ++c)
          patches[(s * C + c) * cells + cell] = *reinterpret_cast<const uint4*>(patch[local][c]);
    }
    // A: cell g + 8*(r&1), pixel k = (c,u,v) of the step.
    std::uint32_t a[kSteps][4];
#pragma unroll
    for (int step = 0; step < kSteps; ++step)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int k0 = step * step_k<P>();
        const int pixel = k0 % kPatchPixels + fragment_k<P>(q, r >> 1, 0);  // both elements in one row word
        const unsigned word = patch[g + 8 * (r & 1)][k0 / kPatchPixels][pixel / kPatch];
        const float lo = byte_value(word, pixel % kPatch);
        const float hi = Format::kPerWord == 2 ? byte_value(word, pixel % kPatch + 1) : 0.0f;
        a[step][r] = Format::pack(lo, hi);
      }

    const int out_local = g + (odd ? 8 : 0);
    const std::int64_t e = tile * kTileCells + out_local;
    const bool out_valid = e < total;
    const std::int64_t s = out_valid ? e / cells : 0;
    const int cell = static_cast<int>(e - s * cells);
    const int first = 2 * (q & 1);  // this thread's outputs p: first, first + 1
#pragma unroll 4
    for (int t = 0; t < kForwardTiles; ++t) {
      if (f0 + 2 * t >= filters) break;  // the same for the whole warp
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int step = 0; step < kSteps; ++step) {
        const uint2 bw = b_s[(t * kSteps + step) * 32 + lane];
        const std::uint32_t b[2] = {bw.x, bw.y};
        Format::mma(acc, a[step], b);
      }
      // Strict >: the lower p of two equal outputs wins.
      const bool g_second = acc[1] > acc[0];
      const bool g8_second = acc[3] > acc[2];
      const float vg = g_second ? acc[1] : acc[0], vg8 = g8_second ? acc[3] : acc[2];
      const int ig = first + (g_second ? 1 : 0), ig8 = first + (g8_second ? 1 : 0);
      const float keep_v = odd ? vg8 : vg;
      const int keep_i = odd ? ig8 : ig;
      const float other_v = __shfl_xor_sync(kFullWarp, odd ? vg : vg8, 1);
      const int other_i = __shfl_xor_sync(kFullWarp, odd ? ig : ig8, 1);
      const float lo_v = odd ? other_v : keep_v, hi_v = odd ? keep_v : other_v;
      const int lo_i = odd ? other_i : keep_i, hi_i = odd ? keep_i : other_i;
      const bool take_hi = hi_v > lo_v;
      const int fl = 2 * t + (q >> 1);
      if (out_valid && f0 + fl < filters) {
        const float z = fmaf(kPixelScale, take_hi ? hi_v : lo_v, bias_s[fl]);
        const std::int64_t o = (s * filters + f0 + fl) * cells + cell;
        pooled[o] = fmaxf(z, 0.0f);
        winners[o] = static_cast<std::uint8_t>((take_hi ? hi_i : lo_i) | (z > 0.0f ? 0u : kReluCutBit));
      }
    }
  }
}

// ---- weight gradient ------------------------------------------------------------------------------

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
#pragma unroll
          for (int c = 0; c < C; ++c) {
            // Pixel 8*(t&1) + g of n tile t = 2c + (t&1): byte g%4 of row 2*(t&1) + g/4, the only two of
            // the patch's four row words this thread reads.
            const unsigned* rows = reinterpret_cast<const unsigned*>(patches + (s * C + c) * cells + cell);
            const unsigned upper = valid ? __ldg(rows + (g >> 2)) : 0u;
            const unsigned lower = valid ? __ldg(rows + 2 + (g >> 2)) : 0u;
            bv[step][2 * c][half][e] = byte_value(upper, g & 3);
            bv[step][2 * c + 1][half][e] = byte_value(lower, g & 3);
          }
#pragma unroll
          for (int m = 0; m < kGradTiles; ++m) {
            const int f = group * kGradFilters + 4 * m + (g & 3);
            const bool live = valid && f < filters;
            const std::int64_t o = (s * filters + f) * cells + cell;
            const unsigned won = live ? __ldg(winners + o) : kReluCutBit;
            const float grad = (won & kReluCutBit) != 0 ? 0.0f : __ldg(grad_pooled + o);
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

// ---- launches -------------------------------------------------------------------------------------

template <Precision P, int C>
ConvReluPoolMmaPlan plan_for(const SeedModel& m, std::int64_t n) {
  ConvReluPoolMmaPlan plan;
  plan.precision = P;
  const int sms = multiprocessor_count();
  const std::int64_t cells = m.pooled().height * m.pooled().width;
  plan.forward_groups = static_cast<int>(ceil_div(m.filters, kForwardFilters));
  plan.fragment_words = std::int64_t{plan.forward_groups} * kForwardTiles * forward_steps<P, C>() * 64;
  static const int forward_resident = resident_blocks_per_multiprocessor(conv_relu_pool_mma_forward_kernel<P, C>, kThreads);
  const std::int64_t tiles = ceil_div(n * cells, kTileCells);
  plan.forward_blocks = static_cast<int>(std::clamp<std::int64_t>(
      std::min<std::int64_t>(ceil_div(tiles, kWarps), std::int64_t{sms} * forward_resident / plan.forward_groups), 1,
      kMaxGridBlocks));
  // Weight gradient: about two waves' worth of resident blocks over all groups, each warp at least 8 chunks.
  static const int grad_resident = resident_blocks_per_multiprocessor(conv_relu_pool_mma_grad_kernel<P, C>, kThreads);
  plan.grad_groups = static_cast<int>(ceil_div(m.filters, kGradFilters));
  plan.chunks_per_sample = static_cast<int>(ceil_div(cells, kTileCells));
  const std::int64_t chunks = n * plan.chunks_per_sample;
  const std::int64_t target = std::max<std::int64_t>(1, std::int64_t{sms} * grad_resident / plan.grad_groups);
  plan.splits = std::clamp<std::int64_t>(ceil_div(chunks, kWarps * 8), 1, target);
  plan.chunks_per_split = std::max<std::int64_t>(1, ceil_div(chunks, plan.splits));
  plan.splits = std::max<std::int64_t>(1, ceil_div(chunks, plan.chunks_per_split));
  plan.workspace_floats = plan.splits * plan.grad_groups * grad_record<C>();
  return plan;
}

template <Precision P, int C>
void forward_for(const ConvReluPoolMmaPlan& plan, float* pooled, std::uint8_t* winners, uint4* patches,
                 const GatheredBatch& in, const float* weight, const float* bias, std::uint32_t* fragments,
                 std::int64_t n, const SeedModel& m, cudaStream_t stream) {
  const int words = static_cast<int>(plan.fragment_words);
  launch_dependent(stage_forward_weights_kernel<P, C>, grid_for(words), kBlockThreads, 0, stream, fragments, weight,
                   m.filters, words);
  CNN_CHECK_LAUNCH();
  const TensorShape p = m.pooled();
  launch_dependent(conv_relu_pool_mma_forward_kernel<P, C>,
                   dim3(static_cast<unsigned>(plan.forward_blocks), static_cast<unsigned>(plan.forward_groups)),
                   kThreads, 0, stream, pooled, winners, patches, in, static_cast<const std::uint32_t*>(fragments),
                   bias, n, m.filters, m.input.height, m.input.width, p.width, p.height * p.width);
  CNN_CHECK_LAUNCH();
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

void check_mma_precision(Precision precision) {
  if (precision != Precision::kTf32 && precision != Precision::kBf16)
    throw Error(ExitCode::kFailure, "internal error: conv_relu_pool's tensor-core form needs tf32 or bf16");
}

}  // namespace

ConvReluPoolMmaPlan plan_conv_relu_pool_mma(const SeedModel& m, std::int64_t n, Precision precision) {
  check_seed_shape(m);
  check_mma_precision(precision);
  check_int_range(n * m.pooled().size(), "conv_relu_pool's pooled output");
  const bool one = m.input.channels == 1;
  if (precision == Precision::kBf16) return one ? plan_for<Precision::kBf16, 1>(m, n) : plan_for<Precision::kBf16, 3>(m, n);
  return one ? plan_for<Precision::kTf32, 1>(m, n) : plan_for<Precision::kTf32, 3>(m, n);
}

std::string ConvReluPoolMmaPlan::describe() const {
  const std::string mma = std::string("mma.") + precision_name(precision);
  return "fused conv + ReLU + pool " + mma + " (k = the 4x4 patch, n = 4 outputs x " +
         std::to_string(forward_groups * kForwardFilters) + " filters); weight gradient " + mma + ", " +
         std::to_string(splits) + " splits";
}

void conv_relu_pool_forward_from_data_mma(const ConvReluPoolMmaPlan& plan, float* pooled, std::uint8_t* winners,
                                          uint4* patches, const std::uint8_t* images, const std::int32_t* indices,
                                          const float* weight, const float* bias, std::uint32_t* fragments,
                                          std::int64_t n, const SeedModel& m, cudaStream_t stream) {
  check_seed_shape(m);
  if (n <= 0) return;
  const GatheredBatch in{images, indices, m.input.size()};
  const bool one = m.input.channels == 1;
  if (plan.precision == Precision::kBf16) {
    if (one) forward_for<Precision::kBf16, 1>(plan, pooled, winners, patches, in, weight, bias, fragments, n, m, stream);
    else forward_for<Precision::kBf16, 3>(plan, pooled, winners, patches, in, weight, bias, fragments, n, m, stream);
  } else {
    if (one) forward_for<Precision::kTf32, 1>(plan, pooled, winners, patches, in, weight, bias, fragments, n, m, stream);
    else forward_for<Precision::kTf32, 3>(plan, pooled, winners, patches, in, weight, bias, fragments, n, m, stream);
  }
}

void conv_relu_pool_backward_weights_mma(const ConvReluPoolMmaPlan& plan, float* grad_weight, float* grad_bias,
                                         const float* grad_pooled, const std::uint8_t* winners, const uint4* patches,
                                         std::int64_t n, const SeedModel& m, bool accumulate, float* workspace,
                                         cudaStream_t stream) {
  check_seed_shape(m);
  if (n <= 0) return;
  const bool one = m.input.channels == 1;
  if (plan.precision == Precision::kBf16) {
    if (one) grad_for<Precision::kBf16, 1>(plan, grad_weight, grad_bias, grad_pooled, winners, patches, n, m, accumulate, workspace, stream);
    else grad_for<Precision::kBf16, 3>(plan, grad_weight, grad_bias, grad_pooled, winners, patches, n, m, accumulate, workspace, stream);
  } else {
    if (one) grad_for<Precision::kTf32, 1>(plan, grad_weight, grad_bias, grad_pooled, winners, patches, n, m, accumulate, workspace, stream);
    else grad_for<Precision::kTf32, 3>(plan, grad_weight, grad_bias, grad_pooled, winners, patches, n, m, accumulate, workspace, stream);
  }
}

}  // namespace cnn::cuda
