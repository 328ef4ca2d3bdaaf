#include "cnn/timing_stats.hpp"

#include "cnn/communicator.hpp"

namespace cnn {

namespace {

constexpr double kBytesPerGB = 1e9;  // decimal GB/s, as nccl-tests and link specs quote them

}  // namespace

RankSpread spread_of(const std::vector<double>& per_rank) {
  RankSpread s;
  if (per_rank.empty()) return s;
  s.min = s.max = per_rank[0];
  double sum = 0.0;
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    sum += per_rank[r];
    if (per_rank[r] < s.min) s.min = per_rank[r];
    if (per_rank[r] > s.max) {
      s.max = per_rank[r];
      s.max_rank = static_cast<int>(r);
    }
  }
  s.mean = sum / static_cast<double>(per_rank.size());
  // The mean of rounded sums can land a hair outside [min, max]; readers check min <= mean <= max.
  if (s.mean < s.min) s.mean = s.min;
  if (s.mean > s.max) s.mean = s.max;
  return s;
}

RankSpread reduce_over_ranks(const MpiWorld& world, double mine) { return spread_of(world.gather_to_root(mine)); }

AllreduceStats allreduce_stats(std::int64_t epoch, int ranks, std::int64_t bytes_per_step, std::int64_t steps,
                               double mean_total_seconds) {
  AllreduceStats a;
  a.epoch = epoch;
  a.ranks = ranks;
  a.bytes_per_step = bytes_per_step;
  a.steps = steps;
  if (steps <= 0 || mean_total_seconds <= 0.0) return a;
  a.mean_s = mean_total_seconds / static_cast<double>(steps);
  a.algbw_GBps = static_cast<double>(bytes_per_step) / a.mean_s / kBytesPerGB;
  // A ring allreduce moves 2(n-1)/n of the buffer over each link (nccl-tests' PERFORMANCE.md).
  a.busbw_GBps = a.algbw_GBps * 2.0 * static_cast<double>(ranks - 1) / static_cast<double>(ranks);
  a.exposed_s = a.mean_s;  // a plain step waits for the whole allreduce
  return a;
}

}  // namespace cnn
