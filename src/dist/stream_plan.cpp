#include "cnn/stream_plan.hpp"

#include <algorithm>
#include <numeric>

#include "cnn/errors.hpp"

namespace cnn {

Range WindowPlan::shifted_batch(std::int64_t step, Range global_batch, int rank, int world) const {
  if (step < first_step || step >= end_step)
    throw Error(ExitCode::kFailure, "internal error: step " + std::to_string(step) + " is outside the window [" +
                                        std::to_string(first_step) + ", " + std::to_string(end_step) + ")");
  const Range mine = rank_slice(global_batch, rank, world);
  // rank_slice(shifted) starts at shifted.begin + (mine.begin - global_batch.begin): choose shifted.begin
  // so that this is slice_begin.
  const std::int64_t target = slice_begin[static_cast<std::size_t>(step - first_step)];
  return {global_batch.begin - mine.begin + target, global_batch.count};
}

WindowPlan plan_window(const std::vector<std::int32_t>& permutation, std::int64_t first_step, std::int64_t end_step,
                       std::int64_t global_batch, int rank, int world) {
  const auto size = static_cast<std::int64_t>(permutation.size());
  WindowPlan plan;
  plan.first_step = first_step;
  plan.end_step = end_step;
  std::vector<std::int64_t> wanted;  // this rank's samples in step order
  for (std::int64_t step = first_step; step < end_step; ++step) {
    const Range mine = rank_slice(global_batch_range(step, size, global_batch), rank, world);
    plan.slice_begin.push_back(static_cast<std::int64_t>(wanted.size()));
    for (std::int64_t p = mine.begin; p < mine.begin + mine.count; ++p)
      wanted.push_back(permutation[static_cast<std::size_t>(p)]);
  }
  plan.samples = wanted;
  std::sort(plan.samples.begin(), plan.samples.end());
  // A permutation never repeats a sample; a repeat would mean a broken order, not a smaller read.
  if (std::adjacent_find(plan.samples.begin(), plan.samples.end()) != plan.samples.end())
    throw Error(ExitCode::kFailure, "internal error: the epoch order repeats a sample");
  plan.order.resize(wanted.size());
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    const auto at = std::lower_bound(plan.samples.begin(), plan.samples.end(), wanted[i]);
    plan.order[i] = static_cast<std::int32_t>(at - plan.samples.begin());
  }
  return plan;
}

std::int64_t steps_per_window(std::int64_t capacity, std::int64_t global_batch, int world) {
  const std::int64_t largest_slice = (global_batch + world - 1) / world;
  return std::max<std::int64_t>(1, capacity / std::max<std::int64_t>(1, largest_slice));
}

}  // namespace cnn
