// Convolution 3x3 + bias + ReLU + 2x2/2 max-pool, forward and backward: the twin of
// src/ops/conv_relu_pool.cpp's conv_relu_pool_forward / conv_relu_pool_backward, and the planned weight
// gradient of the cuda backend's conv_relu_pool op (op_conv_relu_pool.cu, layer_ops.hpp).
#include <algorithm>
#include <type_traits>

#include "ops/conv_backward.cuh"
#include "ops/conv_pool_cell.cuh"
#include "cuda/cuda_check.hpp"
#include "ops/cuda_ops.hpp"
#include "cuda/dependent_launch.cuh"
#include "ops/input_batch.cuh"
#include "cuda/launch.hpp"
#include "ops/layer_ops.hpp"
#include "cuda/stream_scratch.hpp"
#include "ops/staged_layout.cuh"

namespace cnn::cuda {
namespace {

constexpr int kConvThreads = 128;
// Filters per block. The block's filters' weights sit in shared memory, read as float4 broadcasts;
// each thread reuses its input patch (held in registers) for all of them. (8 per block, twice the
// blocks and the warps, was no faster: 12.1 us against 12.3 at batch 128 of 3x32x32 on an H100.)
constexpr int kFiltersPerBlock = 16;

// Weights of one filter plus its bias, padded to whole float4s.
template <int C>
__host__ __device__ constexpr int filter_stride() {
  return (C * kTaps1 + 1 + 3) / 4 * 4;
}

// Thread = (sample, pool cell), looping over the block's filters. Each pool cell needs the 2x2 conv
// outputs below it, which read a 4x4 input patch per channel; computing the four here and keeping
// only the max means the [n,F,26,26] conv output never exists in memory.
// Input: FloatBatch (the twin: a gathered float batch) or GatheredBatch (the conv_relu_pool op: the
// resident uint8 data set through the batch's indices, the same floats as gather_normalize). From
// GatheredBatch, filter group 0 also saves each cell's patch as one 16-byte word per channel
// (PatchBatch, input_batch.cuh) for the weight gradient, where `patches` is given.
// kStagedAs tf32 or bf16: each thread also writes its cell's pooled values into the staged input of
// the conv after the op ([n,PH,PW,Cp] words, StagedTensor): the block's filters are whole 16-byte
// chunks of it (kFiltersPerBlock is a multiple of 8), padded with zeros past the last filter.
template <int C, class Input, Precision kStagedAs = Precision::kFp32>
__global__ void __launch_bounds__(kConvThreads)
    conv3_relu_pool_forward_kernel(float* __restrict__ pooled /*[n,F,PH,PW]*/,
                                   std::uint8_t* __restrict__ argmax /*[n,F,PH,PW]*/,
                                   uint4* __restrict__ patches /*[n,C,P] or null*/, Input in,
                                   const float* __restrict__ weight /*[F,C,3,3]*/, const float* __restrict__ bias /*[F]*/,
                                   std::int64_t n, int filters, int height, int width, int pooled_height,
                                   int pooled_width, uint4* __restrict__ staged /*[n,P,Cp], kStagedAs only*/,
                                   int staged_channels /*Cp*/) {
  start_after_previous_kernel();
  constexpr int kTaps = C * kTaps1;
  constexpr int kStride = filter_stride<C>();
  constexpr bool kFromData = std::is_same_v<Input, GatheredBatch>;
  __shared__ __align__(16) float w_s[kFiltersPerBlock * kStride];  // [filter][taps..., bias, pad]
  // kStagedAs: each thread's pooled values of the block's filters, until they are packed into chunks.
  // (Held in registers, the 16 took 110 registers where the fp32 form takes 78, and the layer 20-30%
  // longer: nvidia-h200, 2026-11-27.)
  __shared__ float staged_s[kStagedAs == Precision::kFp32 ? 1 : kFiltersPerBlock][kConvThreads];

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
    const std::int64_t origin = static_cast<std::int64_t>(kPoolWindow * py) * width + kPoolWindow * px;

    float patch[C][kPatch][kPatch];
    if constexpr (kFromData) {
      uint4 packed[C];
      read_byte_patch<C>(patch, packed, in.sample(s).pixels + origin, plane, width, true);
      if (patches != nullptr && blockIdx.y == 0)
#pragma unroll
        for (int c = 0; c < C; ++c) patches[(s * C + c) * P + cell] = packed[c];
    } else {
      const FloatSample src = in.sample(s);
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int u = 0; u < kPatch; ++u)
#pragma unroll
          for (int v = 0; v < kPatch; ++v) patch[c][u][v] = src[origin + c * plane + u * width + v];
    }

    float* out = pooled + (s * filters + f0) * P + cell;
    std::uint8_t* out_arg = argmax + (s * filters + f0) * P + cell;
    for (int f = 0; f < nf; ++f) {
      float w[kStride];
      load_float4s(w, w_s + f * kStride);
      const PoolWinner best = conv_pool_max<C>(w, patch);
      const float value = fmaxf(best.value, 0.0f);
      out[static_cast<std::int64_t>(f) * P] = value;
      out_arg[static_cast<std::int64_t>(f) * P] = static_cast<std::uint8_t>(best.which);
      if constexpr (kStagedAs != Precision::kFp32) staged_s[f][threadIdx.x] = value;
    }
    if constexpr (kStagedAs != Precision::kFp32) {
      // Each thread reads back its own values: no barrier.
      constexpr int kPerChunk = chunk_elements(kStagedAs);
      uint4* pixel = staged + ((s * P + cell) * staged_channels + f0) / kPerChunk;
      for (int j = 0; j < kFiltersPerBlock / kPerChunk && f0 + j * kPerChunk < staged_channels; ++j) {
        float chunk[kPerChunk];
#pragma unroll
        for (int q = 0; q < kPerChunk; ++q) {
          const int f = j * kPerChunk + q;
          chunk[q] = f < nf ? staged_s[f][threadIdx.x] : 0.0f;
        }
        pixel[j] = pack_chunk<kStagedAs>(chunk);
      }
    }
  }
}

// Adds the sweep's partial sums: one block per (row, filter), row = a weight tap or (last) the bias,
// over splits x pool cells in a fixed order (a strided run per thread, then the warps in order). A
// block per filter alone (conv_grad_finalize_block) gives 32 blocks for the cifar preset's first
// layer, too few to fill the GPU: 17 us at batch 128 on an H100.
template <int C>
__global__ void __launch_bounds__(kBlockThreads)
    conv_grad_finalize_rows_kernel(float* __restrict__ grad_weight /*[F, C*9]*/, float* __restrict__ grad_bias /*[F]*/,
                                   const float* __restrict__ partial /*[splits, rows, F*P]*/, std::int64_t splits,
                                   int filters, int P, bool accumulate) {
  start_after_previous_kernel();
  constexpr int kRows = conv_grad_rows<C>();
  __shared__ float scratch[kBlockThreads / 32];
  const int row = static_cast<int>(blockIdx.x);
  const int f = static_cast<int>(blockIdx.y);
  const std::int64_t columns = static_cast<std::int64_t>(filters) * P;
  const float* src = partial + row * columns + static_cast<std::int64_t>(f) * P;
  // Split by split, the cells strided over the threads: no index division (a 64-bit one per item
  // cost more than the loads), and each split's loads are independent of the sum.
  float acc = 0.0f;
#pragma unroll 4
  for (std::int64_t split = 0; split < splits; ++split) {
    const float* run = src + split * kRows * columns;
    for (int cell = threadIdx.x; cell < P; cell += blockDim.x) acc += __ldg(run + cell);
  }
  const float total = block_sum_shuffle(acc, scratch);
  if (threadIdx.x == 0) {
    float* dst = row < kRows - 1 ? grad_weight + static_cast<std::int64_t>(f) * (kRows - 1) + row : grad_bias + f;
    *dst = accumulate ? *dst + total : total;
  }
}

template <int C, class Input, Precision kStagedAs>
void forward_for_channels(float* pooled, std::uint8_t* argmax, uint4* patches, const Input& in, const float* weight,
                          const float* bias, std::int64_t n, const SeedModel& m, const StagedTensor& staged,
                          cudaStream_t stream) {
  const TensorShape p = m.pooled();
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>(ceil_div(n * p.height * p.width, kConvThreads),
                                                               kMaxGridBlocks)),
                  static_cast<unsigned>(ceil_div(m.filters, kFiltersPerBlock)));
  launch_dependent(conv3_relu_pool_forward_kernel<C, Input, kStagedAs>, grid, kConvThreads, 0, stream, pooled, argmax,
                   patches, in, weight, bias, n, m.filters, m.input.height, m.input.width, p.height, p.width,
                   reinterpret_cast<uint4*>(staged.words), staged.channels_padded);
  CNN_CHECK_LAUNCH();
}

template <int C, class Input>
void forward_for_precision(float* pooled, std::uint8_t* argmax, uint4* patches, const Input& in, const float* weight,
                           const float* bias, std::int64_t n, const SeedModel& m, const StagedTensor& staged,
                           cudaStream_t stream) {
  static_assert(kFiltersPerBlock % chunk_elements(Precision::kBf16) == 0, "a block's filters: whole chunks");
  // Only the data set's form writes a staged copy (conv_relu_pool_forward_from_data); the twin's
  // gathered floats take the fp32 kernel alone, so no staged kernel is built for them.
  if (!std::is_same_v<Input, GatheredBatch> || staged.words == nullptr) {
    forward_for_channels<C, Input, Precision::kFp32>(pooled, argmax, patches, in, weight, bias, n, m, staged, stream);
    return;
  }
  if constexpr (std::is_same_v<Input, GatheredBatch>) {
    if (staged.precision == Precision::kBf16)
      forward_for_channels<C, Input, Precision::kBf16>(pooled, argmax, patches, in, weight, bias, n, m, staged, stream);
    else
      forward_for_channels<C, Input, Precision::kTf32>(pooled, argmax, patches, in, weight, bias, n, m, staged, stream);
  }
}

template <class Input>
void forward(float* pooled, std::uint8_t* argmax, uint4* patches, const Input& in, const float* weight,
             const float* bias, std::int64_t n, const SeedModel& m, const StagedTensor& staged, cudaStream_t stream) {
  check_seed_shape(m);
  if (n <= 0) return;
  if (m.input.channels == 1)
    forward_for_precision<1>(pooled, argmax, patches, in, weight, bias, n, m, staged, stream);
  else
    forward_for_precision<3>(pooled, argmax, patches, in, weight, bias, n, m, staged, stream);
}

// The sweep's input: the gathered floats (FloatBatch) or the patches the forward saved (PatchBatch).
template <int C>
int sweep_blocks(bool from_patches) {
  return from_patches ? sweep_blocks_per_multiprocessor<C, SweepRows::kConvFromGradPooled, PatchBatch<C>>()
                      : sweep_blocks_per_multiprocessor<C, SweepRows::kConvFromGradPooled, FloatBatch>();
}

template <int C>
ConvReluPoolPlan plan_for_channels(const SeedModel& m, std::int64_t n, bool from_patches) {
  ConvReluPoolPlan plan;
  const std::int64_t columns = m.fc_inputs();
  plan.from_patches = from_patches;
  plan.sweep = plan_sweep(n, columns, multiprocessor_count(), sweep_blocks<C>(from_patches));
  plan.workspace_floats = plan.sweep.splits * conv_grad_rows<C>() * columns;
  return plan;
}

template <int C, class Input>
void backward_for_channels(const ConvReluPoolPlan& plan, float* grad_weight, float* grad_bias,
                           const float* grad_pooled, const float* pooled, const std::uint8_t* argmax, const Input& in,
                           std::int64_t n, const SeedModel& m, bool accumulate, float* partial, cudaStream_t stream) {
  const TensorShape p = m.pooled();
  SweepShape shape;
  shape.n = n;
  shape.samples_per_split = plan.sweep.samples_per_split;
  shape.filters = m.filters;
  shape.height = m.input.height;
  shape.width = m.input.width;
  shape.pooled_height = p.height;
  shape.pooled_width = p.width;
  launch_dependent(conv_backward_sweep_kernel<C, SweepRows::kConvFromGradPooled, Input>,
                   dim3(plan.sweep.column_blocks, static_cast<unsigned>(plan.sweep.splits)), kBlockThreads, 0, stream,
                   partial, grad_pooled, nullptr, nullptr, pooled, argmax, in, shape);
  CNN_CHECK_LAUNCH();
  launch_dependent(conv_grad_finalize_rows_kernel<C>, dim3(conv_grad_rows<C>(), static_cast<unsigned>(m.filters)),
                   kBlockThreads, 0, stream, grad_weight, grad_bias, partial, plan.sweep.splits, m.filters,
                   p.height * p.width, accumulate);
  CNN_CHECK_LAUNCH();
}

// The windows from the saved patches (plan.from_patches) or from the gathered floats `in`.
template <int C>
void backward_weights_for_channels(const ConvReluPoolPlan& plan, float* grad_weight, float* grad_bias,
                                   const float* grad_pooled, const float* pooled, const std::uint8_t* argmax,
                                   const float* in, const uint4* patches, std::int64_t n, const SeedModel& m,
                                   bool accumulate, float* workspace, cudaStream_t stream) {
  if (plan.from_patches)
    backward_for_channels<C>(plan, grad_weight, grad_bias, grad_pooled, pooled, argmax,
                             PatchBatch<C>{patches, m.pooled().height * m.pooled().width}, n, m, accumulate,
                             workspace, stream);
  else
    backward_for_channels<C>(plan, grad_weight, grad_bias, grad_pooled, pooled, argmax, FloatBatch{in, m.input.size()},
                             n, m, accumulate, workspace, stream);
}

}  // namespace

void conv_relu_pool_forward(float* pooled, std::uint8_t* argmax, const float* in, const float* weight,
                            const float* bias, std::int64_t n, const SeedModel& m, cudaStream_t stream) {
  forward(pooled, argmax, nullptr, FloatBatch{in, m.input.size()}, weight, bias, n, m, StagedTensor{}, stream);
}

void conv_relu_pool_forward_from_data(float* pooled, std::uint8_t* argmax, uint4* patches,
                                      const StagedTensor& pooled_staged, const std::uint8_t* images,
                                      const std::int32_t* indices, const float* weight, const float* bias,
                                      std::int64_t n, const SeedModel& m, cudaStream_t stream) {
  // Its kernel writes the NHWC layout of its own pooled output [F, PH, PW] (channels padded).
  if (pooled_staged.words != nullptr &&
      pooled_staged.channels_padded != staged_channels(m.filters, pooled_staged.precision))
    throw Error(ExitCode::kFailure, "internal error: the fused first layer's staged output in another layout");
  forward(pooled, argmax, patches, GatheredBatch{images, indices, m.input.size()}, weight, bias, n, m, pooled_staged,
          stream);
}

ConvReluPoolPlan plan_conv_relu_pool(const SeedModel& m, std::int64_t n, bool from_patches) {
  check_seed_shape(m);
  return m.input.channels == 1 ? plan_for_channels<1>(m, n, from_patches) : plan_for_channels<3>(m, n, from_patches);
}

void conv_relu_pool_backward_weights(const ConvReluPoolPlan& plan, float* grad_weight, float* grad_bias,
                                     const float* grad_pooled, const float* pooled, const std::uint8_t* argmax,
                                     const float* in, const uint4* patches, std::int64_t n, const SeedModel& m,
                                     bool accumulate, float* workspace, cudaStream_t stream) {
  check_seed_shape(m);
  if (n <= 0) return;
  if (m.input.channels == 1)
    backward_weights_for_channels<1>(plan, grad_weight, grad_bias, grad_pooled, pooled, argmax, in, patches, n, m,
                                     accumulate, workspace, stream);
  else
    backward_weights_for_channels<3>(plan, grad_weight, grad_bias, grad_pooled, pooled, argmax, in, patches, n, m,
                                     accumulate, workspace, stream);
}

// The twin: plans for this n, and takes the partial sums from the stream-ordered allocator.
void conv_relu_pool_backward(float* grad_weight, float* grad_bias, const float* grad_pooled, const float* pooled,
                             const std::uint8_t* argmax, const float* in, std::int64_t n, const SeedModel& m,
                             cudaStream_t stream) {
  if (n <= 0) return;
  const ConvReluPoolPlan plan = plan_conv_relu_pool(m, n, /*from_patches=*/false);  // checks the shape
  StreamScratch<float> partial(plan.workspace_floats, stream);
  conv_relu_pool_backward_weights(plan, grad_weight, grad_bias, grad_pooled, pooled, argmax, in, nullptr, n, m,
                                  /*accumulate=*/true, partial.get(), stream);
  partial.release();
}

}  // namespace cnn::cuda
