// Adding a product's split partials where they are read (SplitPartials, layer_ops.hpp): in the
// max-pool's backward (the conv after it's input gradient) and in fc_softmax (the fc layer before
// it's output), one launch fewer than the product's sum kernel.
#pragma once

#include <cstdint>

#include "ops/gemm_plan.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {

#ifdef __CUDACC__
// The product's output (row, column) before its store: the splits added in order from 0, as
// gemm_finalize_kernel adds up to kMaxSplitsAddedInOrder of them, so the same bits. Every split's load
// is issued before the adds: with the loads one at a time, each after the add before it, the max-pool's
// backward grew by as much as the sum kernel it replaced took (nvidia-h100-x1, 2026-11-28,
// docs/PERFORMANCE.md).
__device__ __forceinline__ float add_split_partials(const SplitPartials& p, int row, int column) {
  const std::int64_t plane = std::int64_t{p.rows} * p.columns;
  const float* at = p.sums + static_cast<std::int64_t>(column) * p.rows + row;
  float split[kMaxSplitsAddedInOrder];
#pragma unroll
  for (int z = 0; z < kMaxSplitsAddedInOrder; ++z) split[z] = z < p.splits ? __ldg(at + z * plane) : 0.0f;
  float sum = 0.0f;
#pragma unroll
  for (int z = 0; z < kMaxSplitsAddedInOrder; ++z)
    if (z < p.splits) sum += split[z];
  return sum;
}
#endif

// Whether `p` holds a product of rows x columns split 2 to kMaxSplitsAddedInOrder ways.
inline bool holds_split_partials(const SplitPartials& p, std::int64_t rows, std::int64_t columns) {
  return p.rows == rows && p.columns == columns && p.splits >= 2 && p.splits <= kMaxSplitsAddedInOrder;
}

}  // namespace cnn::cuda
