// Which samples one rank needs for a window of training steps, and where each lands in the window.
// Pure functions of the epoch order, so stream mode can be tested without files or MPI.
//
// For steps [first_step, end_step) of an epoch, rank r trains on rank_slice(global batch s) of each
// step s: the positions permutation[slice]. The window holds exactly those samples, once each, in
// ascending sample order (the order a union of hyperslabs is read in), and the backend is given
// `order`: this rank's positions in step order, each mapped to its index in the window. The backend
// then gathers the same samples in the same order as in memory mode, so the arithmetic, and hence
// the parameters, are bitwise the same.
#pragma once

#include <cstdint>
#include <vector>

#include "cnn/sampler.hpp"

namespace cnn {

struct WindowPlan {
  std::int64_t first_step = 0;
  std::int64_t end_step = 0;                // excluded
  std::vector<std::int64_t> samples;        // strictly ascending sample indices to read
  std::vector<std::int32_t> order;          // this rank's positions, step after step -> index in `samples`
  std::vector<std::int64_t> slice_begin;    // per step of the window: where its slice starts in `order`

  // The global batch of step `step` moved so that rank_slice() of it, for this rank, is the step's
  // slice of `order`: train_step() then needs no knowledge of windows.
  Range shifted_batch(std::int64_t step, Range global_batch, int rank, int world) const;
};

WindowPlan plan_window(const std::vector<std::int32_t>& permutation, std::int64_t first_step, std::int64_t end_step,
                       std::int64_t global_batch, int rank, int world);

// Steps per window so that one window holds at most `capacity` samples on every rank (at least 1).
std::int64_t steps_per_window(std::int64_t capacity, std::int64_t global_batch, int world);

}  // namespace cnn
