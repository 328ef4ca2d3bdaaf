// The fused training step of the seed CNN; see seed_step.hpp for the sequence and conv_backward.cuh
// for the gradient formulas and the column-sweep layout.
#include <algorithm>
#include <array>

#include "ops/conv_backward.cuh"
#include "ops/conv_pool_cell.cuh"
#include "cuda/cuda_check.hpp"
#include "ops/cuda_ops.hpp"
#include "cuda/dependent_launch.cuh"
#include "ops/fc_kernels.cuh"
#include "ops/input_batch.cuh"
#include "cuda/launch.hpp"
#include "ops/seed_step.hpp"
#include "ops/softmax_kernels.cuh"

namespace cnn::cuda {
namespace {

// ---- forward ---------------------------------------------------------------------------------------

// Samples per thread of the fused forward: each fc weight a thread loads serves this many samples
// (with 1 the whole fc weight matrix would stream through L2 once per sample). Fewer for 3 input
// channels, whose patches take 3x the registers.
template <int C>
__host__ __device__ constexpr int forward_samples() {
  return C == 1 ? 4 : 1;
}
// Rows of threads per block (threadIdx.y), each with its own forward_samples: the rows load the same
// fc weights at about the same time, so all but the first find them in L1, and the fc weights'
// traffic from L2 is divided by the rows.
template <int C>
__host__ __device__ constexpr int forward_sample_rows() {
  return C == 1 ? 2 : 1;
}
// Per thread: forward_samples x 10 partial logits, padded for warp_halving_sum (multiple of 16).
template <int C>
__host__ __device__ constexpr int forward_accumulators() {
  return (forward_samples<C>() * kSeedClasses + 15) / 16 * 16;
}
template <int C>
__host__ __device__ constexpr int forward_filter_stride() {
  return (C * kTaps1 + 1 + 3) / 4 * 4;  // weights + bias of one filter, in whole float4s
}
constexpr int kForwardMaxCellThreads = 192;  // threadIdx.x: pool cells (13x13 = 169 for 28x28 input)
constexpr int kForwardMaxThreads = 2 * kForwardMaxCellThreads;
constexpr int kForwardMaxWarps = kForwardMaxThreads / 32;
constexpr std::size_t kForwardMaxSharedBytes = 48 * 1024;

// Block = (group of samples, group of filters); thread = (pool cell, row of samples). For each filter the thread
// computes the 2x2 conv outputs of its cell for each sample (4x4 input patches in registers, read
// from the uint8 data set), keeps the max and its position (pooled, argmax), and adds
// W_fc[o, f*P + cell] * pooled into the sample's partial logits. The block then sums the partial
// logits over its cells (warp_halving_sum, then warps in order) and writes one partial sum per
// (filter group, sample, logit); fc_softmax adds the groups. So the fc layer costs no second pass
// over the [n, F*P] activations. The blocks of filter group 0 also save each cell's 4x4 uint8 patch
// (PatchBatch, input_batch.cuh) for the backward sweep.
template <int C>
__global__ void __launch_bounds__(kForwardMaxThreads)
    seed_forward_kernel(float* __restrict__ pooled /*[n,F,PH,PW]*/, std::uint8_t* __restrict__ argmax /*[n,F,PH,PW]*/,
                        float* __restrict__ fc_partial /*[groups, n, O]*/, uint4* __restrict__ patches /*[n,C,P]*/,
                        GatheredBatch in,
                        const float* __restrict__ conv_weight /*[F,C,3,3]*/, const float* __restrict__ conv_bias /*[F]*/,
                        const float* __restrict__ fc_weight /*[O, F*P]*/, std::int64_t n, int filters,
                        int filters_per_group, int height, int width, int pooled_height, int pooled_width) {
  start_after_previous_kernel();
  constexpr int kS = forward_samples<C>();
  constexpr int kO = kSeedClasses;
  constexpr int kAcc = forward_accumulators<C>();
  constexpr int kTaps = C * kTaps1;
  constexpr int kStride = forward_filter_stride<C>();
  extern __shared__ float4 filter_smem[];  // [filters_per_group][kStride] floats
  float* w_s = reinterpret_cast<float*>(filter_smem);
  __shared__ float warp_sums[kForwardMaxWarps][kAcc];

  const std::int64_t group = blockIdx.y;
  const int f0 = static_cast<int>(group) * filters_per_group;
  const int nf = min(filters_per_group, filters - f0);
  if (threadIdx.y == 0) stage_filters(w_s, conv_weight, conv_bias, f0, nf, kTaps, kStride);
  __syncthreads();

  const int P = pooled_height * pooled_width;
  const std::int64_t columns = static_cast<std::int64_t>(filters) * P;
  const std::int64_t plane = static_cast<std::int64_t>(height) * width;
  const std::int64_t s0 = (static_cast<std::int64_t>(blockIdx.x) * blockDim.y + threadIdx.y) * kS;
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;

  for (int cell = threadIdx.x; cell < P; cell += blockDim.x) {
    const int py = cell / pooled_width;
    const int px = cell - py * pooled_width;
    const std::int64_t origin = static_cast<std::int64_t>(kPoolWindow * py) * width + kPoolWindow * px;
    float patch[kS][C][kPatch][kPatch];
#pragma unroll
    for (int si = 0; si < kS; ++si) {
      const bool valid = s0 + si < n;
      // (Sample 0 stands in for those past the batch's end: its pixels are read but never used.)
      const std::uint8_t* pixels = in.sample(valid ? s0 + si : 0).pixels;
      uint4 packed[C];
      read_byte_patch<C>(patch[si], packed, pixels + origin, plane, width, valid);
      // One filter group saves the patch for the backward sweep.
#pragma unroll
      for (int c = 0; c < C; ++c)
        if (group == 0 && valid) patches[((s0 + si) * C + c) * P + cell] = packed[c];
    }
    for (int f = 0; f < nf; ++f) {
      float w[kStride];
      load_float4s(w, w_s + f * kStride);
      const std::int64_t column = static_cast<std::int64_t>(f0 + f) * P + cell;
      float w_fc[kO];
#pragma unroll
      for (int o = 0; o < kO; ++o) w_fc[o] = __ldg(fc_weight + o * columns + column);
#pragma unroll
      for (int si = 0; si < kS; ++si) {
        const PoolWinner best = conv_pool_max<C>(w, patch[si]);
        const float value = fmaxf(best.value, 0.0f);
        if (s0 + si < n) {
          const std::int64_t at = (s0 + si) * columns + column;
          pooled[at] = value;
          argmax[at] = static_cast<std::uint8_t>(best.which);
        }
#pragma unroll
        for (int o = 0; o < kO; ++o) acc[si * kO + o] = fmaf(w_fc[o], value, acc[si * kO + o]);
      }
    }
  }

  // blockDim.x is a multiple of 32, so a warp holds one row's cells.
  const unsigned lane = threadIdx.x & 31u;
  const unsigned row_warps = blockDim.x / 32;
  const unsigned warp = threadIdx.y * row_warps + threadIdx.x / 32;
  warp_halving_sum<kAcc>(acc, lane);
  if ((lane & 1u) == 0) {
    const int base = halving_base<kAcc>(lane);
#pragma unroll
    for (int i = 0; i < kAcc / 16; ++i) warp_sums[warp][base + i] = acc[i];
  }
  __syncthreads();
  if (threadIdx.x < kS * kO) {
    const int si = threadIdx.x / kO;
    const int o = threadIdx.x - si * kO;
    float sum = 0.0f;
    for (unsigned w = 0; w < row_warps; ++w) sum += warp_sums[threadIdx.y * row_warps + w][threadIdx.x];
    if (s0 + si < n) fc_partial[(group * n + s0 + si) * kO + o] = sum;
  }
}

// A warp per sample: logits = bias + the partial sums (fc_logits_from_partials), then lane 0 takes
// the softmax cross-entropy. The logits themselves are never stored. Labels come from the data set
// through `label_indices`, or straight from `labels` when that is null (unused since the unfused
// forward was retired; the kernel is kept as it was measured).
__global__ void fc_softmax_kernel(float* __restrict__ grad_logits /*[n,O]*/, float* __restrict__ sample_loss /*[n]*/,
                                  int* __restrict__ sample_correct /*[n]*/,
                                  const float* __restrict__ fc_partial /*[parts, n, O]*/,
                                  const float* __restrict__ fc_bias /*[O]*/, const std::uint8_t* __restrict__ labels,
                                  const std::int32_t* __restrict__ label_indices /*[n] or null*/, std::int64_t n,
                                  std::int64_t parts, float label_smoothing) {
  start_after_previous_kernel();
  const unsigned lane = threadIdx.x & 31u;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t s = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32; s < n; s += warps) {
    float z[kSeedClasses];
    fc_logits_from_partials(z, fc_partial, fc_bias, n, parts, s, lane);
    if (lane == 0) {
      const int label = labels[label_indices != nullptr ? label_indices[s] : s];
      softmax_cross_entropy_sample(z, label, label_smoothing, grad_logits + s * kSeedClasses, sample_loss[s],
                                   sample_correct[s]);
    }
  }
}


// ---- backward --------------------------------------------------------------------------------------

// Blocks [0, weight_blocks): the fc weight gradient from the sweep's splits. The next F blocks: one
// filter's conv gradients each. The last block: the fc bias gradient and the batch's loss and
// correct count. Everything overwrites, so no memset of the gradient buffer is needed.
// The fc-first step launches it in two parts, the fc layer's blocks (weight, then the bias-and-stats
// block) after the fc rows' sweep and the conv layer's after the conv rows'. A block's work depends
// only on its logical index, so the parts compute the very same bits.
enum FinalizePart : int { kFinalizeAll, kFinalizeFc, kFinalizeConv };

template <int C>
__global__ void __launch_bounds__(kBlockThreads)
    seed_backward_finalize_kernel(SeedStepTensors t, std::int64_t n, std::int64_t splits, int filters, int P,
                                  unsigned weight_blocks, int part) {
  start_after_previous_kernel();
  constexpr int kRows = conv_grad_rows<C>() + kSeedClasses;
  const std::int64_t columns = static_cast<std::int64_t>(filters) * P;
  unsigned block = blockIdx.x;
  if (part == kFinalizeConv) block += weight_blocks;
  else if (part == kFinalizeFc && block == weight_blocks) block = weight_blocks + static_cast<unsigned>(filters);
  if (block < weight_blocks) {
    fc_weight_grad_from_splits(t.grad_fc_weight, t.sweep_partial, kRows, conv_grad_rows<C>(), splits, columns,
                               block, weight_blocks, /*accumulate=*/false);
  } else if (block < weight_blocks + filters) {
    conv_grad_finalize_block<C>(t.grad_conv_weight, t.grad_conv_bias, t.sweep_partial, kRows, splits, filters, P,
                                static_cast<int>(block - weight_blocks), /*accumulate=*/false);
  } else {
    fc_bias_grad_block(t.grad_fc_bias, t.grad_logits, n, /*accumulate=*/false);
    add_batch_stats_block(t.loss_sum, t.correct, t.sample_loss, t.sample_correct, n);
  }
}

SweepShape sweep_shape(const SeedModel& m, const SeedStepPlan& plan) {
  const TensorShape p = m.pooled();
  SweepShape shape;
  shape.n = plan.n;
  shape.samples_per_split = plan.sweep.samples_per_split;
  shape.filters = m.filters;
  shape.height = m.input.height;
  shape.width = m.input.width;
  shape.pooled_height = p.height;
  shape.pooled_width = p.width;
  return shape;
}

template <int C>
void forward_for_channels(const SeedStepTensors& t, const SeedModel& m, const SeedStepPlan& plan,
                          cudaStream_t stream) {
  const std::int64_t n = plan.n;
  const TensorShape p = m.pooled();
  const std::size_t smem = static_cast<std::size_t>(plan.filters_per_group) * forward_filter_stride<C>() * sizeof(float);
  const dim3 grid(static_cast<unsigned>(ceil_div(n, forward_samples<C>() * forward_sample_rows<C>())),
                  static_cast<unsigned>(plan.filter_groups));
  const dim3 block(static_cast<unsigned>(plan.forward_threads), static_cast<unsigned>(forward_sample_rows<C>()));
  launch_dependent(seed_forward_kernel<C>, grid, block, smem, stream, t.pooled, t.argmax, t.fc_partial, t.patches,
                   GatheredBatch{t.images, t.indices, m.input.size()}, t.conv_weight, t.conv_bias, t.fc_weight, n,
                   m.filters, plan.filters_per_group, m.input.height, m.input.width, p.height, p.width);
  CNN_CHECK_LAUNCH();
  launch_dependent(fc_softmax_kernel, grid_for(n * 32, 128), 128, 0, stream, t.grad_logits, t.sample_loss,
                   t.sample_correct, t.fc_partial, t.fc_bias, t.all_labels, t.indices, n, plan.logit_parts,
                   t.label_smoothing);
  CNN_CHECK_LAUNCH();
}

// One sweep over the plan's grid, the windows from the patches the forward saved.
template <int C, SweepRows kSums>
void launch_sweep(const SeedStepTensors& t, const SeedModel& m, const SeedStepPlan& plan, cudaStream_t stream) {
  const dim3 grid(plan.sweep.column_blocks, static_cast<unsigned>(plan.sweep.splits));
  const TensorShape p = m.pooled();
  launch_dependent(conv_backward_sweep_kernel<C, kSums, PatchBatch<C>>, grid, kBlockThreads, 0, stream,
                   t.sweep_partial, nullptr, t.grad_logits, t.fc_weight, t.pooled, t.argmax,
                   PatchBatch<C>{t.patches, p.height * p.width}, sweep_shape(m, plan));
  CNN_CHECK_LAUNCH();
}

template <int C>
void launch_finalize(const SeedStepTensors& t, const SeedModel& m, const SeedStepPlan& plan, cudaStream_t stream,
                     FinalizePart part) {
  const unsigned weight_blocks = grid_for(kSeedClasses * m.fc_inputs());
  const unsigned filters = static_cast<unsigned>(m.filters);
  const unsigned blocks = part == kFinalizeAll ? weight_blocks + filters + 1
                          : part == kFinalizeFc ? weight_blocks + 1
                                                : filters;
  launch_dependent(seed_backward_finalize_kernel<C>, blocks, kBlockThreads, 0, stream, t, plan.n, plan.sweep.splits,
                   m.filters, m.pooled().height * m.pooled().width, weight_blocks, static_cast<int>(part));
  CNN_CHECK_LAUNCH();
}

// Without fc_ready: one sweep for every gradient, then one finalize. With it, fc-first: the fc rows'
// sweep and finalize, fc_ready(), then the conv rows' sweep and finalize, so that the fc gradients'
// allreduce runs under the conv sweep. Both sweeps keep the fused sweep's plan and summation order,
// so the two forms give the same bits; the split form reads pooled twice (kernels/bench/NOTES.md).
template <int C>
void backward_for_channels(const SeedStepTensors& t, const SeedModel& m, const SeedStepPlan& plan,
                           cudaStream_t stream, const std::function<void()>& fc_ready) {
  if (!fc_ready) {
    launch_sweep<C, SweepRows::kConvAndFc>(t, m, plan, stream);
    launch_finalize<C>(t, m, plan, stream, kFinalizeAll);
    return;
  }
  launch_sweep<C, SweepRows::kFcOnly>(t, m, plan, stream);
  launch_finalize<C>(t, m, plan, stream, kFinalizeFc);
  fc_ready();
  launch_sweep<C, SweepRows::kConvOnly>(t, m, plan, stream);
  launch_finalize<C>(t, m, plan, stream, kFinalizeConv);
}

// Resident forward blocks per multiprocessor at `threads` per block: fixed per binary and GPU model,
// asked once per block size.
template <int C>
int forward_blocks_per_multiprocessor(int threads) {
  static std::array<int, kForwardMaxThreads / 32 + 1> asked{};  // by warps per block; 0: not asked yet
  int& blocks = asked[static_cast<std::size_t>(threads / 32)];
  if (blocks == 0) blocks = resident_blocks_per_multiprocessor(seed_forward_kernel<C>, threads);
  return blocks;
}

// Each block's fixed work besides its loop over filters (its patches, the partial logits' reduction and
// writes), in filters' worth: an estimate, not fitted; it only breaks near-ties between plans.
constexpr std::int64_t kForwardBlockCostFilters = 2;

// Filter groups: one or two forward blocks fit on a multiprocessor (about 168 registers a thread; one
// block of 384 threads on sm_90), and each walks its group's filters one after another, so the time
// is about (waves of blocks) x (filters per group + a block's fixed cost). The plan takes the group
// count that minimises that, from the kernel's real occupancy, as plan_sweep does for the sweep: a
// grid of 2.2 waves costs 3 (kernels/bench/NOTES.md, "Forward plan").
template <int C>
void plan_forward(SeedStepPlan& plan, const SeedModel& m, int multiprocessors) {
  const std::int64_t sample_blocks =
      ceil_div(std::max<std::int64_t>(plan.n, 1), forward_samples<C>() * forward_sample_rows<C>());
  const int P = m.pooled().height * m.pooled().width;
  plan.forward_threads = static_cast<int>(std::min<std::int64_t>(ceil_div(P, 32) * 32, kForwardMaxCellThreads));
  const int resident = forward_blocks_per_multiprocessor<C>(plan.forward_threads * forward_sample_rows<C>());
  const std::int64_t capacity = static_cast<std::int64_t>(std::max(resident, 1)) * multiprocessors;
  const std::int64_t most_per_group =
      static_cast<std::int64_t>(kForwardMaxSharedBytes / (forward_filter_stride<C>() * sizeof(float)));
  std::int64_t best_per_group = 0, best_cost = 0;
  for (std::int64_t groups = 1; groups <= m.filters; ++groups) {
    const std::int64_t per_group = ceil_div(m.filters, groups);
    if (per_group > most_per_group) continue;
    const std::int64_t waves = ceil_div(sample_blocks * ceil_div(m.filters, per_group), capacity);
    const std::int64_t cost = waves * (per_group + kForwardBlockCostFilters);
    if (best_per_group == 0 || cost < best_cost) {
      best_per_group = per_group;
      best_cost = cost;
    }
  }
  plan.filters_per_group = static_cast<int>(best_per_group);
  plan.filter_groups = ceil_div(m.filters, plan.filters_per_group);
  plan.logit_parts = plan.filter_groups;
}

}  // namespace

SeedStepPlan plan_seed_step(const SeedModel& m, std::int64_t n) {
  check_seed_shape(m);
  const int multiprocessors = multiprocessor_count();
  SeedStepPlan plan;
  plan.n = n;
  if (m.input.channels == 1)
    plan_forward<1>(plan, m, multiprocessors);
  else
    plan_forward<3>(plan, m, multiprocessors);
  // The sweep reads the windows from the patches the forward saves.
  const int resident = m.input.channels == 1
                           ? sweep_blocks_per_multiprocessor<1, SweepRows::kConvAndFc, PatchBatch<1>>()
                           : sweep_blocks_per_multiprocessor<3, SweepRows::kConvAndFc, PatchBatch<3>>();
  plan.sweep = plan_sweep(n, m.fc_inputs(), multiprocessors, resident);
  plan.patch_words = n * m.input.channels * static_cast<std::int64_t>(m.pooled().height) * m.pooled().width;
  plan.sweep_rows = m.input.channels * kTaps1 + 1 + kSeedClasses;
  plan.fc_partial_floats = plan.logit_parts * n * kSeedClasses;
  plan.sweep_partial_floats = plan.sweep.splits * plan.sweep_rows * m.fc_inputs();
  return plan;
}

void seed_forward_stage(const SeedStepTensors& t, const SeedModel& m, const SeedStepPlan& plan, cudaStream_t stream) {
  if (m.input.channels == 1)
    forward_for_channels<1>(t, m, plan, stream);
  else
    forward_for_channels<3>(t, m, plan, stream);
}

void seed_backward_stage(const SeedStepTensors& t, const SeedModel& m, const SeedStepPlan& plan, cudaStream_t stream,
                         const std::function<void()>& fc_ready) {
  if (m.input.channels == 1)
    backward_for_channels<1>(t, m, plan, stream, fc_ready);
  else
    backward_for_channels<3>(t, m, plan, stream, fc_ready);
}

}  // namespace cnn::cuda
