// The layout of the persistent seed kernel's work and data (seed_persistent.hpp says how the work is
// owned and what a step's phases are): its constants, the block's share of the columns (Ownership),
// the launch-wide shape, the block's shared-memory layout, where each value sits in the flat
// parameter, gradient and optimizer buffers, and which shared values each block reduces and sends.
// The phases that use them are in seed_persistent_phases.cuh.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cnn/optimizer.hpp"
#include "ops/conv_pool_cell.cuh"
#include "ops/seed_persistent.hpp"

namespace cnn::cuda::persistent {

constexpr int kO = kSeedClasses;
constexpr int kThreads = 512;
// One filter row in shared memory: 9 taps, the bias, padding to whole float4s (stage_filters' layout);
// one column's 10 fc weights padded the same way; one sample's 10 dL/dlogits likewise.
constexpr int kRow = 12;
constexpr int kConvValues = kTaps1 + 1;             // a filter's gradient: 9 taps and the bias
constexpr int kColumnSums = kConvValues + kO;       // what the backward sums per column
constexpr int kPatchFloats = kPatch * kPatch;       // one pool cell's 4x4 input patch
constexpr int kMaxChunk = 256;                      // samples staged per round of the backward
constexpr std::size_t kPatchStageBytes = 48 * 1024;  // the backward's staged patches, at most
constexpr std::int64_t kMaxBatch = 8192;

// The block's share of the columns, in cell-major order (q = cell * F + filter), and what it touches.
struct Ownership {
  std::int64_t first;  // q of its first column
  int count;           // columns owned
  int first_cell;
  int cells;
};

__host__ __device__ inline Ownership ownership(int block, int blocks, std::int64_t columns, int filters) {
  Ownership o;
  o.first = block * columns / blocks;
  const std::int64_t end = (block + 1) * columns / blocks;
  o.count = static_cast<int>(end - o.first);
  o.first_cell = static_cast<int>(o.first / filters);
  o.cells = o.count > 0 ? static_cast<int>((end - 1) / filters) - o.first_cell + 1 : 0;
  return o;
}

// Launch-wide constants of the kernel (plan and model), passed by value.
struct Shape {
  std::int64_t n;
  std::int64_t columns;  // J = F * P
  int filters;
  int cells;             // P
  int pooled_width;
  int width;             // input W
  std::int64_t image;    // H * W
  int most_columns;
  int forward_lanes;
  int sweep_splits;
  int chunk;             // samples per staged round of the backward
  int cells_per_block;
};

// The shared memory of a block, carved from one dynamic allocation (offsets in floats, each a
// multiple of 4 so that float4 loads stay aligned).
struct SharedLayout {
  int conv;          // [F][kRow]: taps, bias
  int conv_state;    // [2][F * kConvValues]
  int fc_bias;       // [kRow]: 10 biases
  int fc_bias_state; // [2][kRow]
  int fc;            // [most_columns][kRow]: the owned columns' fc weights
  int sums;          // [splits][most_columns][kColumnSums]
  int logits;        // [chunk][kRow]: staged dL/dlogits
  int patches;       // [cells_per_block][chunk][16]: staged input patches
  int bases;         // [chunk] ints: the staged samples' indices into the data set
  int total;
};

__host__ __device__ inline int round4(int x) { return (x + 3) / 4 * 4; }

__host__ __device__ inline SharedLayout shared_layout(const Shape& s) {
  SharedLayout l;
  int at = 0;
  l.conv = at;
  at += round4(s.filters * kRow);
  l.conv_state = at;
  at += round4(2 * s.filters * kConvValues);
  l.fc_bias = at;
  at += kRow;
  l.fc_bias_state = at;
  at += 2 * kRow;
  l.fc = at;
  at += s.most_columns * kRow;
  l.sums = at;
  at += round4(s.sweep_splits * s.most_columns * kColumnSums);
  l.logits = at;
  at += s.chunk * kRow;
  l.patches = at;
  at += s.cells_per_block * s.chunk * kPatchFloats;
  l.bases = at;
  at += s.chunk;
  l.total = at;
  return l;
}

// The flat index of column q's fc weight for output o.
__device__ __forceinline__ std::int64_t fc_index(const SeedParamOffsets& at, const Shape& s, std::int64_t q, int o) {
  const std::int64_t cell = q / s.filters;
  const std::int64_t f = q - cell * s.filters;
  return at.fc_weight + o * s.columns + f * s.cells + cell;
}

// The flat index of filter f's gradient value r (taps 0..8, then the bias).
__device__ __forceinline__ std::int64_t conv_index(const SeedParamOffsets& at, int f, int r) {
  return r < kTaps1 ? at.conv_weight + static_cast<std::int64_t>(f) * kTaps1 + r : at.conv_bias + f;
}

__device__ __forceinline__ void flag_nonfinite(unsigned long long* verdict, float value, std::int64_t index) {
  if (!isfinite(value)) atomicMin(verdict, static_cast<unsigned long long>(index));
}

// Optimizer state of one parameter: (velocity) or (m, v) or nothing, from `state` (the flat
// optimizer buffer, `total` floats per copy).
struct StateRef {
  float* first;
  float* second;
};
__device__ __forceinline__ StateRef flat_state(float* state, OptimizerKind kind, std::int64_t total, std::int64_t i) {
  if (kind == OptimizerKind::kSgd) return {nullptr, nullptr};
  if (kind == OptimizerKind::kMomentum) return {state + i, nullptr};
  return {state + i, state + total + i};
}

// Element e of the parameters every block keeps a copy of in shared memory: the conv taps and
// biases (e < F * 10, filter-major, taps then bias), then the 10 fc biases. Where it sits in the flat
// buffers, and its copy and optimizer state in shared memory.
struct SharedParam {
  std::int64_t index;
  float* value;
  float* first;
  float* second;
};
__device__ __forceinline__ SharedParam shared_param(const SeedParamOffsets& at, const Shape& s, float* smem,
                                                    const SharedLayout& l, int e) {
  const int conv_values = s.filters * kConvValues;
  if (e < conv_values) {
    const int filter = e / kConvValues;
    const int r = e - filter * kConvValues;
    return {conv_index(at, filter, r), smem + l.conv + filter * kRow + r, smem + l.conv_state + e,
            smem + l.conv_state + conv_values + e};
  }
  const int o = e - conv_values;
  return {at.fc_bias + o, smem + l.fc_bias + o, smem + l.fc_bias_state + o, smem + l.fc_bias_state + kRow + o};
}

// The values every block shares (every conv gradient value, filter-major, then the 10 fc biases): D's
// items. Block b reduces [begin, end) of them, the same share it sends in the exchange of 2+ ranks
// (seed_persistent_exchange.cuh), which can then follow D without a grid barrier.
struct SharedItems {
  int begin;
  int end;
};
__device__ __forceinline__ int shared_item_count(const Shape& s) { return s.filters * kConvValues + kO; }
__device__ __forceinline__ SharedItems block_shared_items(const Shape& s) {
  const int items = shared_item_count(s);
  const int per_block = (items + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  const int begin = min(items, static_cast<int>(blockIdx.x) * per_block);
  return {begin, min(items, begin + per_block)};
}

}  // namespace cnn::cuda::persistent
