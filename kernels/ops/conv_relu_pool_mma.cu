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
// Three quarters of each product's terms are zeros: cheap beside the rest, since what each product
// must move (the forward's stores of pooled and winners, the weight gradient's loads of dL/dpooled)
// outweighs its mma work.
//
// This file: the forward and the plan; the weight gradient: conv_relu_pool_mma_grad.cu; what both
// share: conv_relu_pool_mma.cuh.
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
#include "ops/conv_relu_pool_mma.cuh"
#include "ops/cuda_ops.hpp"
#include "ops/input_batch.cuh"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {
namespace {

using namespace cell_mma;  // NOLINT: the shared constants and helpers of the tensor-core forms

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
  // The lane's share of a tile's patches: cell `local` = lane % 16, rows 2*(lane / 16) and the next of
  // each channel, read as read_byte_patch does. A tile's reads are issued before the previous tile's
  // products, so that they are in flight during them.
  const int local = lane & (kTileCells - 1);
  struct Share {
    bool valid;
    std::int64_t s;
    int cell;
    unsigned rows[C][2];
  };
  auto read_share = [&](std::int64_t tile, Share& share) {
    const std::int64_t e = tile * kTileCells + local;
    share.valid = tile < tiles && e < total;
    share.s = share.valid ? e / cells : 0;
    share.cell = share.valid ? static_cast<int>(e - share.s * cells) : 0;
    const int py = share.cell / pooled_width;
    const int px = share.cell - py * pooled_width;
    // Past the last cell the lane reads the first cell of the batch's first sample (in bounds, with no
    // branch around each load) and keeps zeros.
    const std::uint8_t* pixels =
        in.sample(share.s).pixels + static_cast<std::int64_t>(kPoolWindow * py) * width + kPoolWindow * px;
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int du = 0; du < 2; ++du) {
        const int u = 2 * (lane >> 4) + du;
        unsigned row = 0;
#pragma unroll
        for (int v = 0; v < kPatch; ++v)
          row |= static_cast<unsigned>(__ldg(pixels + c * plane + u * width + v)) << (8 * v);
        share.rows[c][du] = share.valid ? row : 0u;
      }
  };
  const std::int64_t stride = std::int64_t{gridDim.x} * kWarps;
  Share share;
  read_share(blockIdx.x * std::int64_t{kWarps} + warp, share);
  for (std::int64_t tile = blockIdx.x * std::int64_t{kWarps} + warp; tile < tiles; tile += stride) {
    __syncwarp();  // the previous tile's reads of patch_s are done
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int du = 0; du < 2; ++du) patch[local][c][2 * (lane >> 4) + du] = share.rows[c][du];
    __syncwarp();
    if (patches != nullptr && group == 0 && lane < kTileCells && share.valid)
#pragma unroll
      for (int c = 0; c < C; ++c)
        patches[(share.s * C + c) * cells + share.cell] = *reinterpret_cast<const uint4*>(patch[local][c]);
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
    read_share(tile + stride, share);

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

template <Precision P, int C>
ConvReluPoolMmaPlan plan_for(const SeedModel& m, std::int64_t n) {
  ConvReluPoolMmaPlan plan;
  plan.precision = P;
  const int sms = multiprocessor_count();
  const std::int64_t cells = m.pooled().height * m.pooled().width;
  plan.forward_groups = static_cast<int>(ceil_div(m.filters, kForwardFilters));
  plan.fragment_words = std::int64_t{plan.forward_groups} * kForwardTiles * forward_steps<P, C>() * 64;
  const std::int64_t tiles = ceil_div(n * cells, kTileCells);
  const std::int64_t resident = std::int64_t{sms} * forward_blocks_per_multiprocessor(P, C) / plan.forward_groups;
  plan.forward_blocks =
      static_cast<int>(std::clamp<std::int64_t>(std::min(ceil_div(tiles, kWarps), resident), 1, kMaxGridBlocks));
  // Weight gradient: one wave of resident blocks over all groups, each warp at least 8 chunks.
  plan.grad_groups = static_cast<int>(ceil_div(m.filters, kGradFilters));
  plan.chunks_per_sample = static_cast<int>(ceil_div(cells, kTileCells));
  const std::int64_t chunks = n * plan.chunks_per_sample;
  const std::int64_t target =
      std::max<std::int64_t>(1, std::int64_t{sms} * grad_blocks_per_multiprocessor(P, C) / plan.grad_groups);
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

}  // namespace

int cell_mma::forward_blocks_per_multiprocessor(Precision precision, int channels) {
  int blocks = 0;
  dispatch(precision, channels, [&](auto p, auto c) {
    static const int resident =
        resident_blocks_per_multiprocessor(conv_relu_pool_mma_forward_kernel<decltype(p)::value, decltype(c)::value>,
                                           kThreads);
    blocks = resident;
  });
  return blocks;
}

ConvReluPoolMmaPlan plan_conv_relu_pool_mma(const SeedModel& m, std::int64_t n, Precision precision) {
  check_seed_shape(m);
  if (precision != Precision::kTf32 && precision != Precision::kBf16)
    throw Error(ExitCode::kFailure, "internal error: conv_relu_pool's tensor-core form needs tf32 or bf16");
  check_int_range(n * m.pooled().size(), "conv_relu_pool's pooled output");
  ConvReluPoolMmaPlan plan;
  dispatch(precision, m.input.channels,
           [&](auto p, auto c) { plan = plan_for<decltype(p)::value, decltype(c)::value>(m, n); });
  return plan;
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
  dispatch(plan.precision, m.input.channels, [&](auto p, auto c) {
    forward_for<decltype(p)::value, decltype(c)::value>(plan, pooled, winners, patches, in, weight, bias, fragments,
                                                        n, m, stream);
  });
}

}  // namespace cnn::cuda
