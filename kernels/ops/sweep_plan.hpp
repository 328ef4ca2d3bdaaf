// How the column sweeps (conv_backward.cuh, and the fc weight gradient's in fc.cu) split the
// samples of a batch: host code only, so planners that never launch a sweep (the ops' plans)
// need not include the kernels.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cuda/launch.hpp"

namespace cnn::cuda {

// How the samples are split. Each thread walks its split's samples one after another, so the
// sweep's time is about (waves of blocks) x (samples per split): the plan takes the number of splits
// that minimises that, each split also costing about kSplitCostSamples samples' worth of work (its
// partial sums, written here and read by the finalize). It depends only on the shape, the GPU model
// and the kernel's occupancy, so the summation order is the same on every run.
struct SweepPlan {
  unsigned column_blocks = 1;
  std::int64_t splits = 1;
  std::int64_t samples_per_split = 1;
};

constexpr std::int64_t kMinSamplesPerSplit = 16;
constexpr std::int64_t kSplitCostSamples = 8;

inline SweepPlan plan_sweep(std::int64_t n, std::int64_t columns, int multiprocessors, int blocks_per_multiprocessor) {
  SweepPlan plan;
  plan.column_blocks = static_cast<unsigned>(ceil_div(columns, kBlockThreads));
  const std::int64_t capacity = static_cast<std::int64_t>(std::max(blocks_per_multiprocessor, 1)) * multiprocessors;
  n = std::max<std::int64_t>(n, 1);
  // Each split writes `rows` (about 20) partial values per column, where the batch has n: beyond n/16
  // splits the partial sums would cost more memory traffic than the activations they summarise.
  const std::int64_t most = std::clamp<std::int64_t>(n / kMinSamplesPerSplit, 1, 65535);
  std::int64_t best = 1;
  std::int64_t best_cost = 0;
  for (std::int64_t splits = 1; splits <= most; ++splits) {
    const std::int64_t waves = ceil_div(static_cast<std::int64_t>(plan.column_blocks) * splits, capacity);
    const std::int64_t cost = waves * (ceil_div(n, splits) + kSplitCostSamples);
    if (splits == 1 || cost < best_cost) {
      best = splits;
      best_cost = cost;
    }
  }
  plan.samples_per_split = ceil_div(n, best);
  plan.splits = ceil_div(n, plan.samples_per_split);
  return plan;
}

}  // namespace cnn::cuda
