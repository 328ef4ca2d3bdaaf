// The convolution's tensor-core forms (tf32, bf16; layer_ops.hpp, conv2d_forward_staged and the
// staged backward): the staging kernels, and the launches of the products over what they staged
// (mma_gemm.cuh, with the chunk loaders of conv_chunk_loaders.cuh).
//
// Staged layouts, in the precision's 32-bit words (a tf32 value, or a bf16 pair c, c+1):
//   input        NHWC [n,H,W,Cp], channels padded with zeros to whole 16-byte chunks (4 tf32, 8 bf16)
//   output grad  NHWC [n,OH,OW,Fp]
//   weight       the forward's [F][(i,j,c) of KK*Cp], then the input gradient's [C][(i,j,f) of KK*Fp]
// so that one chunk is one tap's 4 or 8 consecutive channels: one bounds test and one 16-byte load,
// where the element loaders of conv.cu take a dozen instructions per element.
//
//   forward      M = n*OH*OW (s,oy,ox)  N = F              K = KK*Cp (i,j,c)   chunks along k
//   input grad   M = n*H*W   (s,h,w)    N = C              K = KK*Fp (i,j,f)   chunks along k
//   weight grad  M = F                  N = KK*Cp + chunk  K = n*OH*OW         chunks across m and n
// With a 2x2/2 max-pool after the conv's ReLU (the cifar preset's conv2), the forward's rows are the
// pool windows' outputs in fours (PoolOrderedWindowA, in the order of the plan's warps: mma.sync's or,
// on sm_90a, the warpgroup's) and its store pools them in registers (ConvPooledStore): the pool's
// output, argmax and the next conv's staged input are written there, and the conv's own output, and
// the pool's pass over it, are not (89 MB written and read at batch 2048).
// The input gradient's A is the staged output gradient at ((h+pad-i)/S, (w+pad-j)/S); at stride 1, on
// an sm_90a build and GPU, the TMA unit copies it in boxes of pixels (wgmma_tma_conv.cuh) where the
// plan says so (plan_pixel_boxes, layer_plans.cu). The weight
// gradient's A is the staged output gradient, f contiguous at each position; its B the staged
// input's windows, c contiguous at each (position, tap), plus one chunk whose first column is 1
// (the bias). The forward and input-gradient stores are the element forms' (conv_products.cuh).
#include <cstdint>
#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "ops/conv_chunk_loaders.cuh"
#include "ops/conv_products.cuh"
#include "ops/layer_ops.hpp"
#include "ops/layer_ops_gemm.cuh"
#include "ops/staged_layout.cuh"
#include "ops/wgmma_tma_conv.cuh"

namespace cnn::cuda {

namespace {

// ---- staging --------------------------------------------------------------------------------------

// dst[s, p, c] = round(src[s, c, p]) for c < C, 0 for C <= c < Cp: a transpose through shared
// memory, a block per 64 pixels (s, p) x 32 channels. Lanes read consecutive pixels of a plane, then
// write consecutive 16-byte chunks of a pixel's channels. (A thread per pixel looping over its
// chunks waited on one round of loads per chunk, 280 us for conv2's output gradient at batch 2048
// in tf32; a thread per chunk read well and wrote 16 bytes to every 128: 148 us in bf16, where
// the per-pixel loop took 65.)
constexpr int kStagePixels = 64;
constexpr int kStageChannels = 32;

template <Precision P>
__global__ void __launch_bounds__(kBlockThreads)
    stage_nhwc_kernel(uint4* __restrict__ dst, const float* __restrict__ src, int pixels, FastDiv by_hw, int C,
                      int Cp) {
  start_after_previous_kernel();
  using Format = MmaFormat<P>;
  constexpr int kPerChunk = 4 * Format::kPerWord;
  constexpr int kChunksPerSlab = kStageChannels / kPerChunk;
  __shared__ float tile[kStageChannels][kStagePixels + 1];
  const int hw = static_cast<int>(by_hw.divisor);
  const int pixel0 = blockIdx.x * kStagePixels;
  const int c_begin = blockIdx.y * kStageChannels;
  // Load: thread t reads pixel t % 64 of channels t / 64, + 4, ...
  const int lp = threadIdx.x % kStagePixels;
  const int pixel = pixel0 + lp;
  const int s = by_hw.div(pixel);
  const float* plane0 = src + static_cast<std::int64_t>(s) * C * hw + (pixel - s * hw);
  for (int lc = threadIdx.x / kStagePixels; lc < kStageChannels; lc += kBlockThreads / kStagePixels) {
    const int c = c_begin + lc;
    tile[lc][lp] = pixel < pixels && c < C ? __ldg(plane0 + static_cast<std::int64_t>(c) * hw) : 0.0f;
  }
  __syncthreads();
  // Store: thread t writes chunk t % kChunksPerSlab of pixel t / kChunksPerSlab, and so on.
  for (int e = threadIdx.x; e < kStagePixels * kChunksPerSlab; e += kBlockThreads) {
    const int wp = e / kChunksPerSlab;
    const int chunk = e % kChunksPerSlab;
    const int c0 = c_begin + chunk * kPerChunk;
    if (pixel0 + wp >= pixels || c0 >= Cp) continue;
    std::uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int lc = chunk * kPerChunk + q * Format::kPerWord;
      w[q] = pack_word<P>(tile[lc][wp], tile[lc + Format::kPerWord - 1][wp]);
    }
    dst[(static_cast<std::int64_t>(pixel0 + wp) * Cp + c0) / kPerChunk] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// stage_nhwc_kernel's words where each sample is one pixel (hw = 1: an fc layer run as a 1x1
// convolution): no transpose, a thread per 16-byte chunk, reading its 4 or 8 consecutive values of a
// row. (Through stage_nhwc_kernel the lanes of a warp read 32 rows a column at a time: 13.2 us for
// fc1's input at batch 2048 in bf16, nvidia-h100-x1, docs/PERFORMANCE.md, the fourteenth part.)
template <Precision P>
__global__ void __launch_bounds__(kBlockThreads)
    stage_rows_kernel(uint4* __restrict__ dst, const float* __restrict__ src, int rows, int C, int Cp) {
  start_after_previous_kernel();
  constexpr int kPerChunk = chunk_elements(P);
  const int chunks_per_row = Cp / kPerChunk;
  const std::int64_t chunks = static_cast<std::int64_t>(rows) * chunks_per_row;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < chunks;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = e / chunks_per_row;
    const int c0 = static_cast<int>(e - row * chunks_per_row) * kPerChunk;
    const float* src_row = src + row * C;
    float v[kPerChunk];
#pragma unroll
    for (int q = 0; q < kPerChunk; ++q) v[q] = c0 + q < C ? __ldg(src_row + c0 + q) : 0.0f;
    dst[e] = pack_chunk<P>(v);
  }
}

// One staged order of the weights [F,C,KK]: dst[r, tap, col] = round(w[r * row_stride +
// col * col_stride + tap]) for col < cols, 0 up to cols_padded. The forward's is [F][KK][Cp]
// (r = f, col = c), the input gradient's [C][KK][Fp] (r = c, col = f).
struct WeightOrder {
  uint4* dst;
  int rows, cols, cols_padded, row_stride, col_stride;
};

// Both orders in one launch, one thread per (r, tap, chunk): the weights change only in the update,
// so one staging a step serves the forward and the backward's input gradient, one kernel fewer per
// step (conv2d_stage_weights).
template <Precision P>
__global__ void stage_weights_kernel(const float* __restrict__ w, int kk, WeightOrder first, WeightOrder second) {
  start_after_previous_kernel();
  using Format = MmaFormat<P>;
  constexpr int kPerChunk = 4 * Format::kPerWord;
  const int first_chunks = first.rows * kk * (first.cols_padded / kPerChunk);
  const int chunks = first_chunks + second.rows * kk * (second.cols_padded / kPerChunk);
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < chunks; e += gridDim.x * blockDim.x) {
    const bool in_first = e < first_chunks;
    const WeightOrder& order = in_first ? first : second;
    const int local = in_first ? e : e - first_chunks;
    const int chunks_per_tap = order.cols_padded / kPerChunk;
    const int rt = local / chunks_per_tap;  // r * kk + tap
    const int col0 = (local - rt * chunks_per_tap) * kPerChunk;
    const int r = rt / kk;
    const int tap = rt - r * kk;
    float v[kPerChunk];
#pragma unroll
    for (int q = 0; q < kPerChunk; ++q)
      v[q] = col0 + q < order.cols ? __ldg(w + r * order.row_stride + (col0 + q) * order.col_stride + tap) : 0.0f;
    order.dst[local] = pack_chunk<P>(v);
  }
}

template <Precision P>
void stage_nhwc(std::uint32_t* dst, const float* src, std::int64_t n, int channels, int hw, int channels_padded,
                cudaStream_t stream) {
  const int pixels = static_cast<int>(n * hw);
  if (hw == 1) {
    launch_dependent(stage_rows_kernel<P>, grid_for(std::int64_t{pixels} * channels_padded / chunk_elements(P)),
                     kBlockThreads, 0, stream, reinterpret_cast<uint4*>(dst), src, pixels, channels, channels_padded);
    CNN_CHECK_LAUNCH();
    return;
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(pixels, kStagePixels)),
                  static_cast<unsigned>(ceil_div(channels_padded, kStageChannels)));
  launch_dependent(stage_nhwc_kernel<P>, grid, kBlockThreads, 0, stream, reinterpret_cast<uint4*>(dst), src, pixels,
                   FastDiv(hw), channels, channels_padded);
  CNN_CHECK_LAUNCH();
}

// Where the input gradient's order of the staged weights starts, in words: after the forward's
// [F][KK*Cp].
template <Precision P>
std::int64_t dgrad_weights_offset(const ConvGeometry& g) {
  return std::int64_t{g.F} * g.KK * staged_channels(g.C, P) / word_elements(P);
}

// Stages both orders of the weights into staged.weight: the forward's, then the input gradient's.
template <Precision P>
void stage_weights(std::uint32_t* dst, const float* w, const ConvGeometry& g, cudaStream_t stream) {
  const int cp = staged_channels(g.C, P);
  const int fp = staged_channels(g.F, P);
  const WeightOrder forward{reinterpret_cast<uint4*>(dst), g.F, g.C, cp, g.C * g.KK, g.KK};
  const WeightOrder input_grad{reinterpret_cast<uint4*>(dst + dgrad_weights_offset<P>(g)), g.C, g.F, fp, g.KK,
                               g.C * g.KK};
  const int chunks = (g.F * cp + g.C * fp) * g.KK / chunk_elements(P);
  launch_dependent(stage_weights_kernel<P>, grid_for(chunks), kBlockThreads, 0, stream, w, g.KK, forward, input_grad);
  CNN_CHECK_LAUNCH();
}

// grad_weight[f, c, i, j] (+)= v for column n = (i,j,c) with c < C; column KK*Cp is the bias; the
// padded channels and the rest of the bias chunk are dropped.
struct StagedWeightGradStore {
  float* grad_weight;
  float* grad_bias;
  int C, KK, Cp;
  FastDiv by_cp;
  bool accumulate;
  __device__ __forceinline__ void operator()(int f, int n, float v) const {
    float* dst = nullptr;
    if (n < KK * Cp) {
      const int tap = by_cp.div(n);
      const int c = n - tap * Cp;
      if (c < C) dst = grad_weight + (static_cast<std::int64_t>(f) * C + c) * KK + tap;
    } else if (n == KK * Cp) {
      dst = grad_bias + f;
    }
    if (dst != nullptr) *dst = accumulate ? *dst + v : v;
  }
};

// The stores' writer into a neighbour's staged tensor `t` (words null: none) from a tensor of
// sample_size elements a sample, the NCHW order of t's [pixels, channels] flattened.
template <Precision P>
StagedScatter scatter_into(const StagedTensor& t, std::int64_t sample_size) {
  if (t.words == nullptr) return {};
  if (t.precision != P || !holds_staged_samples(t, sample_size))
    throw Error(ExitCode::kFailure, "internal error: a staged tensor of " + std::to_string(t.pixels) + " x " +
                                        std::to_string(t.channels_padded) + " " + precision_name(t.precision) +
                                        " for " + std::to_string(sample_size) + " elements a sample in " +
                                        precision_name(P));
  return {t.words, P == Precision::kBf16, static_cast<int>(sample_size / t.pixels), t.channels_padded,
          FastDiv(t.pixels)};
}

template <Precision P>
void forward_staged(const LayerPlans& plans, float* out, const StagedTensor& out_staged, const float* in,
                    const float* weight, const float* bias, std::int64_t n, const ConvShape& s, bool relu,
                    const StagedBuffers& staged, bool input_staged, bool weights_staged, float* workspace,
                    cudaStream_t stream) {
  const ConvGeometry g(s);
  const int cp = staged_channels(g.C, P);
  if (!input_staged) stage_nhwc<P>(staged.input, in, n, g.C, g.HW, cp, stream);
  if (!weights_staged) stage_weights<P>(staged.weight, weight, g, stream);
  const int shift = word_shift(P);
  const StagedWindowA a{staged.input, shift, g.H, g.W, cp, g.stride, g.pad, static_cast<int>(n * g.OHW),
                        g.by_ohw, g.by_ow, FastDiv(cp), g.by_ks};
  const StagedRowsB b{staged.weight, shift, g.F, g.KK * cp};
  const StagedScatter next = scatter_into<P>(out_staged, g.FOHW);
  launch_either(relu, plans.forward, a, b, ConvForwardStore<true, true>{out, bias, g.by_ohw, g.OHW, g.F, next},
                ConvForwardStore<false, true>{out, bias, g.by_ohw, g.OHW, g.F, next}, workspace, stream);
}

// The forward's outputs through the ReLU and the 2x2/2 max-pool after it, a window at a time
// (MmaWarpTile::store_windows; rows of PoolOrderedWindowA): each output is v + bias[f] through the
// ReLU, as ConvForwardStore<true> stores it, and the window's first maximum in row-major order wins,
// as maxpool_forward_kernel picks it. Writes the pool's output and argmax (an index into the conv's
// output plane, OW wide) and, where staged is given, the words of the conv after the pool ([n,PH,PW,Fp]:
// a bf16 pair of filters n, n+1 in one word, or one tf32 word each; filters F..Fp-1 zero).
template <Precision P>
struct ConvPooledStore {
  static constexpr bool kPoolWindows = true;
  float* pooled;
  std::int32_t* argmax;
  std::uint32_t* staged;  // null: no conv after the pool takes it staged
  const float* bias;
  int windows, filters, filters_padded, ow;
  FastDiv by_phw, by_pw;
  __device__ __forceinline__ void window(int w, int n, const float (&z0)[4], const float (&z1)[4]) const {
    if (w >= windows || n >= filters_padded) return;
    const int s = by_phw.div(w);
    const int r = w - s * static_cast<int>(by_phw.divisor);
    const int py = by_pw.div(r);
    const int px = r - py * static_cast<int>(by_pw.divisor);
    float best[2] = {0.0f, 0.0f};
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int f = n + q;
      if (f >= filters) continue;
      const float(&z)[4] = q == 0 ? z0 : z1;
      const float b = bias[f];
      best[q] = fmaxf(z[0] + b, 0.0f);
      int which = 0;
#pragma unroll
      for (int e = 1; e < 4; ++e) {
        const float y = fmaxf(z[e] + b, 0.0f);
        if (y > best[q]) best[q] = y, which = e;
      }
      const std::int64_t o = (static_cast<std::int64_t>(s) * filters + f) * by_phw.divisor + r;
      pooled[o] = best[q];
      argmax[o] = (2 * py + (which >> 1)) * ow + 2 * px + (which & 1);
    }
    if (staged == nullptr) return;
    const std::int64_t word = (static_cast<std::int64_t>(w) * filters_padded + n) >> word_shift(P);
    if constexpr (P == Precision::kBf16) {
      staged[word] = pack_word<P>(best[0], best[1]);
    } else {
      staged[word] = pack_word<P>(best[0], 0.0f);
      staged[word + 1] = pack_word<P>(best[1], 0.0f);
    }
  }
};

template <Precision P>
void forward_staged_pooled(const LayerPlans& plans, const PooledOutput& pooled, const float* in, const float* weight,
                           const float* bias, std::int64_t n, const ConvShape& s, const StagedBuffers& staged,
                           bool input_staged, bool weights_staged, cudaStream_t stream) {
  const ConvGeometry g(s);
  const PoolShape pool{g.F, g.OH, g.OW, 2, 2};
  const int cp = staged_channels(g.C, P);
  const int fp = staged_channels(g.F, P);
  const int windows = static_cast<int>(n * pool.out_h() * pool.out_w());
  if (pooled.out_staged.words != nullptr &&
      (pooled.out_staged.precision != P || pooled.out_staged.channels_padded != fp))
    throw Error(ExitCode::kFailure, "internal error: a pooled conv's staged output in another layout");
  if (!input_staged) stage_nhwc<P>(staged.input, in, n, g.C, g.HW, cp, stream);
  if (!weights_staged) stage_weights<P>(staged.weight, weight, g, stream);
  const int shift = word_shift(P);
  const FastDiv by_phw(pool.out_h() * pool.out_w()), by_pw(pool.out_w());
  const PoolOrderedWindowA a{{staged.input, shift, g.H, g.W, cp, g.stride, g.pad, 0, g.by_ohw, g.by_ow, FastDiv(cp),
                              g.by_ks},
                             windows,
                             by_phw,
                             by_pw,
                             pool_window_bits(plans.pooled_forward)};
  const StagedRowsB b{staged.weight, shift, g.F, g.KK * cp};
  const ConvPooledStore<P> store{pooled.out, pooled.argmax, pooled.out_staged.words, bias, windows, g.F, fp, g.OW,
                                 by_phw, by_pw};
  if (plans.pooled_forward.splits != 1)
    throw Error(ExitCode::kFailure, "internal error: a pooled forward's plan splits k");
  launch_chunk_tile<P>(plans.pooled_forward, a, b, store, nullptr, stream);
  CNN_CHECK_LAUNCH();
}

// The input gradient's weights [C][KK*Fp], after the forward's [F][KK*Cp] (staged by the forward,
// with its own).
template <Precision P>
std::uint32_t* dgrad_weights(const StagedBuffers& staged, const ConvGeometry& g) {
  return staged.weight + dgrad_weights_offset<P>(g);
}

template <Precision P>
void stage_backward(const float* grad_out, std::int64_t n, const ConvShape& s, const StagedBuffers& staged,
                    cudaStream_t stream) {
  const ConvGeometry g(s);
  stage_nhwc<P>(staged.output_grad, grad_out, n, g.F, g.OHW, staged_channels(g.F, P), stream);
}

template <Precision P>
void backward_data_staged(const LayerPlans& plans, float* grad_in, const float* relu_out, std::int64_t n,
                          const ConvShape& s, const StagedBuffers& staged, float* workspace, bool leave_splits,
                          cudaStream_t stream) {
  const ConvGeometry g(s);
  const int fp = staged_channels(g.F, P);
  const int shift = word_shift(P);
  const ConvDgradStore<true> masked{grad_in, relu_out, g.by_hw, g.HW, g.C};
  const ConvDgradStore<false> unmasked{grad_in, nullptr, g.by_hw, g.HW, g.C};
  if (leave_splits && (relu_out != nullptr || conv_input_grad_partials(plans, workspace, n, s).sums == nullptr))
    throw Error(ExitCode::kFailure, "internal error: a conv's input gradient left in split partials by the plan " +
                                        plans.dgrad.describe() + (relu_out != nullptr ? ", masked" : ""));
  if (plans.dgrad.tma()) {
    const TmaDgradOperands op{staged.output_grad, dgrad_weights<P>(staged, g), static_cast<int>(n), g.H, g.W, g.C,
                              g.OH, g.OW, fp >> shift, g.KS, g.pad};
    if (relu_out != nullptr)
      launch_tma_dgrad<P>(plans.dgrad, op, masked, stream);
    else
      launch_tma_dgrad<P>(plans.dgrad, op, unmasked, stream);
    return;
  }
  const StagedGradA a{staged.output_grad, shift, g.OH, g.OW, fp, g.stride, static_cast<int>(n * g.HW), g.pad,
                      g.by_hw, g.by_w, FastDiv(fp), g.by_ks};
  const StagedRowsB b{dgrad_weights<P>(staged, g), shift, g.C, g.KK * fp};
  if (leave_splits)
    launch_gemm(plans.dgrad, a, b, unmasked, workspace, stream, false);
  else
    launch_either(relu_out != nullptr, plans.dgrad, a, b, masked, unmasked, workspace, stream);
}

template <Precision P>
void backward_weights_staged(const LayerPlans& plans, float* grad_weight, float* grad_bias, const ConvShape& s,
                             bool accumulate, const StagedBuffers& staged, float* workspace, cudaStream_t stream) {
  const ConvGeometry g(s);
  const int cp = staged_channels(g.C, P);
  const int fp = staged_channels(g.F, P);
  const int shift = word_shift(P);
  const StagedGradAcross a{staged.output_grad, shift, fp};
  const StagedWindowAcross b{staged.input, shift, P == Precision::kBf16, g.H, g.W, cp, g.KK * cp, g.stride, g.pad,
                             g.OH, g.OW, g.by_ohw, g.by_ow, FastDiv(cp), g.by_ks};
  launch_gemm(plans.wgrad, a, b, StagedWeightGradStore{grad_weight, grad_bias, g.C, g.KK, cp, FastDiv(cp), accumulate},
              workspace, stream);
}

}  // namespace

int staged_channels(int c, Precision precision) {
  const int chunk = chunk_elements(precision);
  return (c + chunk - 1) / chunk * chunk;
}

bool holds_staged_samples(const StagedTensor& t, std::int64_t sample_size) {
  return t.words != nullptr && t.pixels > 0 && sample_size % t.pixels == 0 &&
         t.channels_padded == staged_channels(static_cast<int>(sample_size / t.pixels), t.precision);
}

void conv2d_stage_weights(const LayerPlans& plans, const float* weight, const ConvShape& shape,
                          const StagedBuffers& staged, cudaStream_t stream) {
  if (plans.forward.precision == Precision::kBf16)
    stage_weights<Precision::kBf16>(staged.weight, weight, ConvGeometry(shape), stream);
  else
    stage_weights<Precision::kTf32>(staged.weight, weight, ConvGeometry(shape), stream);
}

void conv2d_forward_staged(const LayerPlans& plans, float* out, const StagedTensor& out_staged, const float* in,
                           const float* weight, const float* bias, std::int64_t n, const ConvShape& shape, bool relu,
                           const StagedBuffers& staged, bool input_staged, bool weights_staged, float* workspace,
                           cudaStream_t stream) {
  if (n <= 0) return;
  if (plans.forward.precision == Precision::kBf16)
    forward_staged<Precision::kBf16>(plans, out, out_staged, in, weight, bias, n, shape, relu, staged, input_staged,
                                     weights_staged, workspace, stream);
  else
    forward_staged<Precision::kTf32>(plans, out, out_staged, in, weight, bias, n, shape, relu, staged, input_staged,
                                     weights_staged, workspace, stream);
}

void conv2d_forward_staged_pooled(const LayerPlans& plans, const PooledOutput& pooled, const float* in,
                                  const float* weight, const float* bias, std::int64_t n, const ConvShape& shape,
                                  const StagedBuffers& staged, bool input_staged, bool weights_staged,
                                  cudaStream_t stream) {
  if (n <= 0) return;
  if (plans.pooled_forward.precision == Precision::kBf16)
    forward_staged_pooled<Precision::kBf16>(plans, pooled, in, weight, bias, n, shape, staged, input_staged,
                                            weights_staged, stream);
  else
    forward_staged_pooled<Precision::kTf32>(plans, pooled, in, weight, bias, n, shape, staged, input_staged,
                                            weights_staged, stream);
}

void conv2d_stage_backward(const LayerPlans& plans, const float* grad_out, std::int64_t n, const ConvShape& shape,
                           const StagedBuffers& staged, cudaStream_t stream) {
  if (n <= 0) return;
  if (plans.wgrad.precision == Precision::kBf16)
    stage_backward<Precision::kBf16>(grad_out, n, shape, staged, stream);
  else
    stage_backward<Precision::kTf32>(grad_out, n, shape, staged, stream);
}

void conv2d_backward_data_staged(const LayerPlans& plans, float* grad_in, const float* relu_out, std::int64_t n,
                                 const ConvShape& shape, const StagedBuffers& staged, float* workspace,
                                 bool leave_splits, cudaStream_t stream) {
  if (n <= 0) return;
  if (plans.dgrad.precision == Precision::kBf16)
    backward_data_staged<Precision::kBf16>(plans, grad_in, relu_out, n, shape, staged, workspace, leave_splits,
                                           stream);
  else
    backward_data_staged<Precision::kTf32>(plans, grad_in, relu_out, n, shape, staged, workspace, leave_splits,
                                           stream);
}

SplitPartials conv_input_grad_partials(const LayerPlans& plans, const float* workspace, std::int64_t n,
                                       const ConvShape& shape) {
  const GemmPlan& plan = plans.dgrad;
  if (!plans.staged || plan.tma() || plan.splits < 2 || plan.splits > kMaxSplitsAddedInOrder) return {};
  if (plan.m != n * shape.height * shape.width || plan.n != shape.channels)
    throw Error(ExitCode::kFailure, "internal error: a conv's input gradient planned as " + std::to_string(plan.m) +
                                        " x " + std::to_string(plan.n) + " for a batch of " + std::to_string(n));
  return {workspace, plan.splits, plan.m, plan.n};
}

void conv2d_backward_weights_staged(const LayerPlans& plans, float* grad_weight, float* grad_bias, std::int64_t n,
                                    const ConvShape& shape, bool accumulate, const StagedBuffers& staged,
                                    float* workspace, cudaStream_t stream) {
  if (n <= 0) return;
  if (plans.wgrad.precision == Precision::kBf16)
    backward_weights_staged<Precision::kBf16>(plans, grad_weight, grad_bias, shape, accumulate, staged, workspace,
                                              stream);
  else
    backward_weights_staged<Precision::kTf32>(plans, grad_weight, grad_bias, shape, accumulate, staged, workspace,
                                              stream);
}

}  // namespace cnn::cuda
