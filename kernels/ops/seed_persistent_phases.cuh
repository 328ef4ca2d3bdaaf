// The phases of the persistent seed kernel (seed_persistent.cu; seed_persistent.hpp says how the work
// is owned and what a step's phases are; seed_persistent_layout.cuh holds the layout they share): the
// five phases of a step (A forward, B loss, C backward, D the reduction over blocks, E the
// update) and the parameters' load at the launch's start. Data that another block wrote earlier in
// the same launch is read with __ldcg (from L2, which every multiprocessor shares), never through L1
// or the read-only path, which could still hold an earlier step's line; only the data set and the
// epoch's order, which no step writes, are read through __ldg.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/launch.hpp"
#include "dist/reduce.cuh"
#include "ops/conv_pool_cell.cuh"
#include "ops/input_batch.cuh"
#include "ops/nonfinite.cuh"
#include "ops/seed_persistent.hpp"
#include "ops/seed_persistent_layout.cuh"
#include "ops/softmax_kernels.cuh"

namespace cnn::cuda::persistent {

// A pool cell's 4x4 patch of sample s (a position in `order`) as floats, from the uint8 data set.
__device__ __forceinline__ void load_patch(float (&patch)[1][kPatch][kPatch], const SeedPersistentArgs& a,
                                           const Shape& s, std::int64_t sample, int cell) {
  const std::int64_t py = cell / s.pooled_width;
  const std::int64_t px = cell - py * s.pooled_width;
  const std::uint8_t* pixels =
      a.images + static_cast<std::int64_t>(__ldg(a.order + sample)) * s.image + kPoolWindow * py * s.width + kPoolWindow * px;
  uint4 packed[1];
  read_byte_patch<1>(patch, packed, pixels, s.image, s.width, true);
}

// ---- the phases ------------------------------------------------------------------------------------

// A. This block's columns for every sample: conv + ReLU + pool, and their part of each sample's
// logits. forward_lanes threads share a sample, each a contiguous run of the columns in order; their
// sums meet in a butterfly (every lane ends with the same bits). With more samples than threads'
// slots, a thread takes kSamples samples at a time: each column's weights, loaded from shared memory
// once, serve both, and the two samples' sums are independent chains.
template <int kSamples>
__device__ inline void forward_samples(const SeedPersistentArgs& a, const Shape& s, const Ownership& own, const float* smem,
                                const SharedLayout& l, int step) {
  const int lanes = s.forward_lanes;
  const int slot = static_cast<int>(threadIdx.x) / lanes;
  const int part = static_cast<int>(threadIdx.x) - slot * lanes;
  const int slots = kThreads / lanes;
  const int u_begin = part * own.count / lanes;
  const int u_end = (part + 1) * own.count / lanes;
  const std::int64_t step_first = static_cast<std::int64_t>(step) * a.order_stride;
  for (std::int64_t base = 0; base < s.n; base += kSamples * slots) {
    std::int64_t sample[kSamples];
    bool valid[kSamples];
    float acc[kSamples][kO];
#pragma unroll
    for (int i = 0; i < kSamples; ++i) {
      sample[i] = base + i * slots + slot;
      valid[i] = sample[i] < s.n;
#pragma unroll
      for (int o = 0; o < kO; ++o) acc[i][o] = 0.0f;
    }
    if (valid[0] && u_begin < u_end) {
      // Columns in cell-major order: the filter steps by one, the cell (and its patches) when it wraps.
      const std::int64_t q = own.first + u_begin;
      int cell = static_cast<int>(q / s.filters);
      int f = static_cast<int>(q - static_cast<std::int64_t>(cell) * s.filters);
      float patch[kSamples][1][kPatch][kPatch];
#pragma unroll
      for (int i = 0; i < kSamples; ++i)
        if (valid[i]) load_patch(patch[i], a, s, step_first + sample[i], cell);
      for (int u = u_begin; u < u_end; ++u) {
        float w[kRow];
        load_float4s(w, smem + l.conv + f * kRow);
        float w_fc[kRow];
        load_float4s(w_fc, smem + l.fc + u * kRow);
#pragma unroll
        for (int i = 0; i < kSamples; ++i) {
          const float value = fmaxf(conv_pool_value<1, kRow>(w, patch[i]), 0.0f);
#pragma unroll
          for (int o = 0; o < kO; ++o) acc[i][o] = fmaf(w_fc[o], value, acc[i][o]);
        }
        if (++f == s.filters && u + 1 < u_end) {
          f = 0;
          ++cell;
#pragma unroll
          for (int i = 0; i < kSamples; ++i)
            if (valid[i]) load_patch(patch[i], a, s, step_first + sample[i], cell);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kSamples; ++i) {
      for (int offset = 1; offset < lanes; offset *= 2)
#pragma unroll
        for (int o = 0; o < kO; ++o) acc[i][o] += __shfl_xor_sync(kFullWarp, acc[i][o], offset);
      if (valid[i] && part == 0) {
        float* out = a.block_logits + (static_cast<std::int64_t>(blockIdx.x) * s.n + sample[i]) * kO;
#pragma unroll
        for (int o = 0; o < kO; ++o) out[o] = acc[i][o];
      }
    }
  }
}

__device__ inline void forward_phase(const SeedPersistentArgs& a, const Shape& s, const Ownership& own, const float* smem,
                              const SharedLayout& l, int step) {
  if (s.n > kThreads / s.forward_lanes)
    forward_samples<2>(a, s, own, smem, l, step);
  else
    forward_samples<1>(a, s, own, smem, l, step);
}

// B. A warp per sample: logits = bias + the blocks' partial sums (lane l adds blocks l, l+32, ... in
// order, then a butterfly), then the softmax cross-entropy and dL/dlogits.
__device__ inline void loss_phase(const SeedPersistentArgs& a, const Shape& s, const float* smem, const SharedLayout& l,
                           int step) {
  const unsigned lane = threadIdx.x & 31u;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (kThreads / 32);
  const std::int64_t step_first = static_cast<std::int64_t>(step) * a.order_stride;
  for (std::int64_t sample = blockIdx.x * static_cast<std::int64_t>(kThreads / 32) + threadIdx.x / 32; sample < s.n;
       sample += warps) {
    float z[kO];
#pragma unroll
    for (int o = 0; o < kO; ++o) z[o] = 0.0f;
#pragma unroll 5
    for (unsigned c = lane; c < gridDim.x; c += 32) {
      const float* row = a.block_logits + (static_cast<std::int64_t>(c) * s.n + sample) * kO;
#pragma unroll
      for (int o = 0; o < kO; ++o) z[o] += __ldcg(row + o);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
#pragma unroll
      for (int o = 0; o < kO; ++o) z[o] += __shfl_xor_sync(kFullWarp, z[o], offset);
#pragma unroll
    for (int o = 0; o < kO; ++o) z[o] = smem[l.fc_bias + o] + z[o];
    if (lane == 0) {
      const int label = __ldg(a.labels + __ldg(a.order + step_first + sample));
      softmax_cross_entropy_sample(z, label, a.label_smoothing, a.grad_logits + sample * kO, a.sample_loss[sample],
                                   a.sample_correct[sample]);
    }
  }
}

// C. This block's columns: with splits threads per column, each summing the samples s = split,
// split + splits, ... in order, the fc weight gradient (dL/dlogit x pooled) and, through the
// recomputed pool winner, the conv gradient's terms; then the splits in order, then per filter its
// columns in order. Writes the fc weight gradient to the flat buffer (and keeps it in `sums` for the
// update) and the block's share of each filter's gradient to conv_partial.
__device__ inline void backward_phase(const SeedPersistentArgs& a, const Shape& s, const Ownership& own, float* smem,
                               const SharedLayout& l, int step) {
  const int splits = s.sweep_splits;
  const int u = static_cast<int>(threadIdx.x) % s.most_columns;
  const int split = static_cast<int>(threadIdx.x) / s.most_columns;
  const bool active = split < splits && u < own.count;
  const std::int64_t q = own.first + (active ? u : 0);
  const int cell = static_cast<int>(q / s.filters);
  const int f = static_cast<int>(q - static_cast<std::int64_t>(cell) * s.filters);
  float w[kRow], w_fc[kRow];
  load_float4s(w, smem + l.conv + f * kRow);
  load_float4s(w_fc, smem + l.fc + (active ? u : 0) * kRow);
  float acc[kColumnSums];
#pragma unroll
  for (int r = 0; r < kColumnSums; ++r) acc[r] = 0.0f;
  const std::int64_t step_first = static_cast<std::int64_t>(step) * a.order_stride;
  float* logits_s = smem + l.logits;
  float* patches_s = smem + l.patches;

  for (std::int64_t chunk = 0; chunk < s.n; chunk += s.chunk) {
    const int count = static_cast<int>(min(static_cast<std::int64_t>(s.chunk), s.n - chunk));
    __syncthreads();  // the previous round's readers are done
    int* samples_s = reinterpret_cast<int*>(smem + l.bases);
    for (int k = threadIdx.x; k < count; k += kThreads) samples_s[k] = __ldg(a.order + step_first + chunk + k);
    for (int e = threadIdx.x; e < count * kO; e += kThreads) {
      const int k = e / kO;
      logits_s[k * kRow + (e - k * kO)] = __ldcg(a.grad_logits + chunk * kO + e);
    }
    __syncthreads();
    // A thread per patch row: four bytes of one sample's image, as floats.
    for (int e = threadIdx.x; e < own.cells * count * kPatch; e += kThreads) {
      const int row = e % kPatch;
      const int k = (e / kPatch) % count;
      const int c = e / (kPatch * count);
      const int at_cell = own.first_cell + c;
      const int py = at_cell / s.pooled_width;
      const int px = at_cell - py * s.pooled_width;
      const std::uint8_t* pixels = a.images + static_cast<std::int64_t>(samples_s[k]) * s.image +
                                   static_cast<std::int64_t>(kPoolWindow * py + row) * s.width + kPoolWindow * px;
      float4 v;
      v.x = pixel_value(__ldg(pixels));
      v.y = pixel_value(__ldg(pixels + 1));
      v.z = pixel_value(__ldg(pixels + 2));
      v.w = pixel_value(__ldg(pixels + 3));
      reinterpret_cast<float4*>(patches_s)[(c * s.chunk + k) * kPatch + row] = v;
    }
    __syncthreads();
    if (!active) continue;
    const float* my_patches = patches_s + (cell - own.first_cell) * s.chunk * kPatchFloats;
#pragma unroll 2
    for (int k = static_cast<int>((split - chunk % splits + splits) % splits); k < count; k += splits) {
      float flat[kPatchFloats];
      load_float4s(flat, my_patches + k * kPatchFloats);
      float patch[1][kPatch][kPatch];
#pragma unroll
      for (int i = 0; i < kPatch; ++i)
#pragma unroll
        for (int j = 0; j < kPatch; ++j) patch[0][i][j] = flat[i * kPatch + j];
      const PoolWinner best = conv_pool_max<1, kRow>(w, patch);
      const float value = fmaxf(best.value, 0.0f);
      float gl[kRow];
      load_float4s(gl, logits_s + k * kRow);
#pragma unroll
      for (int o = 0; o < kO; ++o) acc[kConvValues + o] = fmaf(gl[o], value, acc[kConvValues + o]);
      float g = 0.0f;
#pragma unroll
      for (int o = 0; o < kO; ++o) g = fmaf(gl[o], w_fc[o], g);
      g = value > 0.0f ? g : 0.0f;  // the ReLU cut it: no gradient reaches the conv
      // The winner's 3x3 window, read again from the staged patch at the winner's offset (indexing the
      // registers' copy by the winner would put it in local memory; selects cost three per tap).
      const float* window = my_patches + k * kPatchFloats + (best.which >> 1) * kPatch + (best.which & 1);
#pragma unroll
      for (int i = 0; i < kSeedKernel; ++i)
#pragma unroll
        for (int j = 0; j < kSeedKernel; ++j)
          acc[i * kSeedKernel + j] = fmaf(g, window[i * kPatch + j], acc[i * kSeedKernel + j]);
      acc[kTaps1] += g;
    }
  }

  // The splits of each column, in order, in place into split 0's slots.
  float* sums = smem + l.sums;
  if (active)
#pragma unroll
    for (int r = 0; r < kColumnSums; ++r) sums[(split * s.most_columns + u) * kColumnSums + r] = acc[r];
  __syncthreads();
  for (int e = threadIdx.x; e < own.count * kColumnSums; e += kThreads) {
    const int cu = e / kColumnSums;
    const int r = e - cu * kColumnSums;
    float total = 0.0f;
    for (int k = 0; k < splits; ++k) total += sums[(k * s.most_columns + cu) * kColumnSums + r];
    sums[cu * kColumnSums + r] = total;
    if (r >= kConvValues) {
      const std::int64_t index = fc_index(a.at, s, own.first + cu, r - kConvValues);
      a.grads[index] = total;
      flag_nonfinite(a.verdict, total, index);
    }
  }
  __syncthreads();
  // Each filter's share: its columns in order (they are filters apart in cell-major order).
  for (int e = threadIdx.x; e < s.filters * kConvValues; e += kThreads) {
    const int filter = e / kConvValues;
    const int r = e - filter * kConvValues;
    const int first = static_cast<int>(((filter - own.first % s.filters) + s.filters) % s.filters);
    float total = 0.0f;
    for (int cu = first; cu < own.count; cu += s.filters) total += sums[cu * kColumnSums + r];
    a.conv_partial[(static_cast<std::int64_t>(blockIdx.x) * s.filters + filter) * kConvValues + r] = total;
  }
}

// D. A warp per value, each block its share of the shared items: each conv gradient value sums the
// blocks' shares (lanes over blocks, then a butterfly), each fc bias gradient sums dL/dlogits over
// the samples; and the last block's last warp adds the batch's loss and hits.
__device__ inline void reduce_phase(const SeedPersistentArgs& a, const Shape& s, int step) {
  const unsigned lane = threadIdx.x & 31u;
  const int warp = static_cast<int>(threadIdx.x / 32);
  constexpr int kWarps = kThreads / 32;
  const std::int64_t conv_items = static_cast<std::int64_t>(s.filters) * kConvValues;
  const SharedItems mine = block_shared_items(s);
  for (std::int64_t item = mine.begin + warp; item < mine.end; item += kWarps) {
    if (item < conv_items) {
      float total = 0.0f;
#pragma unroll 5
      for (unsigned c = lane; c < gridDim.x; c += 32) total += __ldcg(a.conv_partial + c * conv_items + item);
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(kFullWarp, total, offset);
      if (lane == 0) {
        const int filter = static_cast<int>(item / kConvValues);
        const std::int64_t index = conv_index(a.at, filter, static_cast<int>(item - filter * kConvValues));
        a.grads[index] = total;
        flag_nonfinite(a.verdict, total, index);
      }
    } else {
      const int o = static_cast<int>(item - conv_items);
      float total = 0.0f;
      for (std::int64_t sample = lane; sample < s.n; sample += 32) total += __ldcg(a.grad_logits + sample * kO + o);
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(kFullWarp, total, offset);
      if (lane == 0) {
        const std::int64_t index = a.at.fc_bias + o;
        if (step == a.nan_at && index == a.at.total - 1) total = NAN;  // the test hook's poisoned element
        a.grads[index] = total;
        flag_nonfinite(a.verdict, total, index);
      }
    }
  }
  if (blockIdx.x == gridDim.x - 1 && warp == kWarps - 1) {
    double loss = 0.0;
    long long hits = 0;
    for (std::int64_t sample = lane; sample < s.n; sample += 32) {
      loss += static_cast<double>(__ldcg(a.sample_loss + sample));
      hits += __ldcg(a.sample_correct + sample);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      loss += __shfl_xor_sync(kFullWarp, loss, offset);
      hits += __shfl_xor_sync(kFullWarp, hits, offset);
    }
    if (lane == 0) {
      *a.loss_sum += loss;
      *a.correct += hits;
    }
  }
}

// E. The update: this block's fc columns (shared memory, the flat buffer and their optimizer state,
// which only this block touches), and every block its copies of the conv weights and the fc bias
// (block 0 also writes them and their state to the flat buffers).
__device__ inline void update_phase(const SeedPersistentArgs& a, const Shape& s, const Ownership& own, float* smem,
                             const SharedLayout& l, const StepRule& rule) {
  const float* sums = smem + l.sums;
  for (int e = threadIdx.x; e < own.count * kO; e += kThreads) {
    const int u = e / kO;
    const int o = e - u * kO;
    const std::int64_t index = fc_index(a.at, s, own.first + u, o);
    const StateRef st = flat_state(a.state, rule.kind, a.at.total, index);
    float first = st.first ? *st.first : 0.0f, second = st.second ? *st.second : 0.0f;
    const float p = apply_rule(rule, smem[l.fc + u * kRow + o], sums[u * kColumnSums + kConvValues + o], first, second);
    smem[l.fc + u * kRow + o] = p;
    a.params[index] = p;
    if (st.first) *st.first = first;
    if (st.second) *st.second = second;
  }
  const bool writer = blockIdx.x == 0;
  for (int e = threadIdx.x; e < s.filters * kConvValues + kO; e += kThreads) {
    const SharedParam p = shared_param(a.at, s, smem, l, e);
    *p.value = apply_rule(rule, *p.value, __ldcg(a.grads + p.index), *p.first, *p.second);
    if (writer) {
      a.params[p.index] = *p.value;
      const StateRef st = flat_state(a.state, rule.kind, a.at.total, p.index);
      if (st.first) *st.first = *p.first;
      if (st.second) *st.second = *p.second;
    }
  }
}

// Every block: its copies of the conv weights and fc bias (and their optimizer state), and its own
// columns' fc weights, from the flat buffers.
__device__ inline void load_parameters(const SeedPersistentArgs& a, const Shape& s, const Ownership& own, float* smem,
                                const SharedLayout& l, OptimizerKind kind) {
  for (int e = threadIdx.x; e < s.filters * kConvValues + kO; e += kThreads) {
    const SharedParam p = shared_param(a.at, s, smem, l, e);
    const StateRef st = flat_state(a.state, kind, a.at.total, p.index);
    *p.value = a.params[p.index];
    *p.first = st.first ? *st.first : 0.0f;
    *p.second = st.second ? *st.second : 0.0f;
  }
  for (int e = threadIdx.x; e < s.filters; e += kThreads)
    for (int r = kConvValues; r < kRow; ++r) smem[l.conv + e * kRow + r] = 0.0f;
  for (int e = threadIdx.x; e < s.most_columns * kRow; e += kThreads) {
    const int u = e / kRow;
    const int o = e - u * kRow;
    smem[l.fc + e] = u < own.count && o < kO ? a.params[fc_index(a.at, s, own.first + u, o)] : 0.0f;
  }
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

}  // namespace cnn::cuda::persistent
