// Convolution 3x3 + bias + ReLU + 2x2/2 max-pool, forward and backward: the twin of
// src/ops_conv.cpp's conv_relu_pool_forward / conv_relu_pool_backward.
#include <algorithm>

#include "conv_backward.cuh"
#include "conv_pool_cell.cuh"
#include "cuda_check.hpp"
#include "cuda_ops.hpp"
#include "launch.hpp"
#include "stream_scratch.hpp"

namespace cnn::cuda {
namespace {

constexpr int kConvThreads = 128;
// Filters per block. The block's filters' weights sit in shared memory, read as float4 broadcasts;
// each thread reuses its input patch (held in registers) for all of them.
constexpr int kFiltersPerBlock = 16;

// Weights of one filter plus its bias, padded to whole float4s.
template <int C>
__host__ __device__ constexpr int filter_stride() {
  return (C * kTaps1 + 1 + 3) / 4 * 4;
}

// Thread = (sample, pool cell), looping over the block's filters. Each pool cell needs the 2x2 conv
// outputs below it, which read a 4x4 input patch per channel; computing the four here and keeping
// only the max means the [n,F,26,26] conv output never exists in memory.
template <int C>
__global__ void __launch_bounds__(kConvThreads)
    conv3_relu_pool_forward_kernel(float* __restrict__ pooled /*[n,F,PH,PW]*/,
                                   std::uint8_t* __restrict__ argmax /*[n,F,PH,PW]*/,
                                   const float* __restrict__ in /*[n,C,H,W]*/,
                                   const float* __restrict__ weight /*[F,C,3,3]*/, const float* __restrict__ bias /*[F]*/,
                                   std::int64_t n, int filters, int height, int width, int pooled_height,
                                   int pooled_width) {
  constexpr int kTaps = C * kTaps1;
  constexpr int kStride = filter_stride<C>();
  __shared__ __align__(16) float w_s[kFiltersPerBlock * kStride];  // [filter][taps..., bias, pad]

  const int f0 = blockIdx.y * kFiltersPerBlock;
  const int nf = min(kFiltersPerBlock, filters - f0);
  stage_filters(w_s, weight, bias, f0, nf, kTaps, kStride);
  __syncthreads();

  const int P = pooled_height * pooled_width;
  const std::int64_t plane = static_cast<std::int64_t>(height) * width;
  const std::int64_t total = n * P;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t s = e / P;
    const int cell = static_cast<int>(e - s * P);
    const int py = cell / pooled_width;
    const int px = cell - py * pooled_width;

    float patch[C][kPatch][kPatch];
    const float* src = in + s * C * plane + static_cast<std::int64_t>(kPoolWindow * py) * width + kPoolWindow * px;
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int u = 0; u < kPatch; ++u)
#pragma unroll
        for (int v = 0; v < kPatch; ++v) patch[c][u][v] = __ldg(src + c * plane + u * width + v);

    float* out = pooled + (s * filters + f0) * P + cell;
    std::uint8_t* out_arg = argmax + (s * filters + f0) * P + cell;
    for (int f = 0; f < nf; ++f) {
      float w[kStride];
      load_float4s(w, w_s + f * kStride);
      const PoolWinner best = conv_pool_max<C>(w, patch);
      out[static_cast<std::int64_t>(f) * P] = fmaxf(best.value, 0.0f);
      out_arg[static_cast<std::int64_t>(f) * P] = static_cast<std::uint8_t>(best.which);
    }
  }
}

template <int C>
__global__ void __launch_bounds__(kBlockThreads)
    conv_grad_finalize_kernel(float* __restrict__ grad_weight, float* __restrict__ grad_bias,
                              const float* __restrict__ partial, std::int64_t splits, int filters, int P) {
  conv_grad_finalize_block<C>(grad_weight, grad_bias, partial, conv_grad_rows<C>(), splits, filters, P,
                              blockIdx.x, /*accumulate=*/true);
}

template <int C>
void forward_for_channels(float* pooled, std::uint8_t* argmax, const float* in, const float* weight,
                          const float* bias, std::int64_t n, const SeedModel& m, cudaStream_t stream) {
  const TensorShape p = m.pooled();
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>(ceil_div(n * p.height * p.width, kConvThreads),
                                                               kMaxGridBlocks)),
                  static_cast<unsigned>(ceil_div(m.filters, kFiltersPerBlock)));
  conv3_relu_pool_forward_kernel<C><<<grid, kConvThreads, 0, stream>>>(
      pooled, argmax, in, weight, bias, n, m.filters, m.input.height, m.input.width, p.height, p.width);
  CNN_CHECK_LAUNCH();
}

template <int C>
void backward_for_channels(float* grad_weight, float* grad_bias, const float* grad_pooled, const float* pooled,
                           const std::uint8_t* argmax, const float* in, std::int64_t n, const SeedModel& m,
                           cudaStream_t stream) {
  const TensorShape p = m.pooled();
  const std::int64_t columns = m.fc_inputs();
  const SweepPlan plan =
      plan_sweep(n, columns, multiprocessor_count(), sweep_blocks_per_multiprocessor<C, false, FloatBatch>());
  StreamScratch<float> partial(plan.splits * conv_grad_rows<C>() * columns, stream);
  SweepShape shape;
  shape.n = n;
  shape.samples_per_split = plan.samples_per_split;
  shape.filters = m.filters;
  shape.height = m.input.height;
  shape.width = m.input.width;
  shape.pooled_height = p.height;
  shape.pooled_width = p.width;
  conv_backward_sweep_kernel<C, false><<<dim3(plan.column_blocks, static_cast<unsigned>(plan.splits)),
                                         kBlockThreads, 0, stream>>>(partial.get(), grad_pooled, nullptr, nullptr,
                                                                     pooled, argmax,
                                                                     FloatBatch{in, m.input.size()}, shape);
  CNN_CHECK_LAUNCH();
  conv_grad_finalize_kernel<C><<<m.filters, kBlockThreads, 0, stream>>>(grad_weight, grad_bias, partial.get(),
                                                                        plan.splits, m.filters, p.height * p.width);
  CNN_CHECK_LAUNCH();
  partial.release();
}

}  // namespace

void conv_relu_pool_forward(float* pooled, std::uint8_t* argmax, const float* in, const float* weight,
                            const float* bias, std::int64_t n, const SeedModel& m, cudaStream_t stream) {
  check_seed_shape(m);
  if (n <= 0) return;
  if (m.input.channels == 1)
    forward_for_channels<1>(pooled, argmax, in, weight, bias, n, m, stream);
  else
    forward_for_channels<3>(pooled, argmax, in, weight, bias, n, m, stream);
}

void conv_relu_pool_backward(float* grad_weight, float* grad_bias, const float* grad_pooled, const float* pooled,
                             const std::uint8_t* argmax, const float* in, std::int64_t n, const SeedModel& m,
                             cudaStream_t stream) {
  check_seed_shape(m);
  if (n <= 0) return;
  if (m.input.channels == 1)
    backward_for_channels<1>(grad_weight, grad_bias, grad_pooled, pooled, argmax, in, n, m, stream);
  else
    backward_for_channels<3>(grad_weight, grad_bias, grad_pooled, pooled, argmax, in, n, m, stream);
}

}  // namespace cnn::cuda
