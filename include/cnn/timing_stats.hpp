// Per-epoch timing figures reduced over ranks, for timing.csv and allreduce.csv (docs/LOGS.md).
//   RankSpread: one value per rank -> min, mean, max and the rank of the max, so stragglers show.
//   AllreduceStats: the gradient allreduce as nccl-tests reports it: algbw = bytes / time and
//   busbw = algbw * 2(n-1)/n, the bandwidth each link needs for a ring allreduce, comparable with
//   the hardware's peak whatever the rank count.
#pragma once

#include <cstdint>
#include <vector>

#include "cnn/phase_times.hpp"

namespace cnn {

class MpiWorld;

struct RankSpread {
  double min = 0.0, mean = 0.0, max = 0.0;
  int max_rank = 0;  // the lowest rank holding the max
};

// Of one value per rank (index = rank). An empty input gives zeros.
RankSpread spread_of(const std::vector<double>& per_rank);

// Collective: the spread of `mine` over ranks, on rank 0 (zeros elsewhere).
RankSpread reduce_over_ranks(const MpiWorld& world, double mine);

struct AllreduceStats {
  std::int64_t epoch = 0;           // 1-based
  int ranks = 1;
  std::int64_t bytes_per_step = 0;  // the gradient buffer
  std::int64_t steps = 0;           // allreduces timed this epoch (by this process)
  double mean_s = 0.0;              // seconds per allreduce, mean over ranks
  double algbw_GBps = 0.0;          // bytes_per_step / mean_s, in 1e9 bytes/s
  double busbw_GBps = 0.0;          // algbw * 2(ranks-1)/ranks
  // The overlapped step (gradient_overlap.hpp): mean_s is then the allreduces' own duration per step
  // and exposed_s the part a step waited for after its compute; plain steps wait for all of it.
  int overlap = 0;                  // 1: overlapped with the backward
  int buckets = 1;                  // allreduces per step
  double exposed_s = 0.0;           // seconds per step not hidden under compute
  double overlap_fraction = 0.0;    // 1 - exposed_s / mean_s
};

// mean_total_seconds: the allreduce phase of the epoch, mean over ranks. Bandwidths are 0 when
// nothing was timed (one rank, or no steps).
AllreduceStats allreduce_stats(std::int64_t epoch, int ranks, std::int64_t bytes_per_step, std::int64_t steps,
                               double mean_total_seconds);

}  // namespace cnn
