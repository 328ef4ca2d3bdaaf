// Overlapping the gradient allreduce with the backward (docs/PERFORMANCE.md, "overlap").
//
// A backend reports ranges of its gradient buffer as they become final (GradientReadyPoint,
// gradient_ready.hpp). Each allreduce costs about latency + bytes / bandwidth (AllreduceCost, fitted
// to allreduces timed at start-up), and the reductions run one after another on one channel. The
// planner groups consecutive ready points into buckets and keeps the grouping with the least
// predicted exposed time - the allreduce time left after the backward's compute has ended. A bucket
// per point hides the most when latency is small against the compute after each point; one bucket
// at the end pays the latency once. OverlapReducer then starts each bucket's allreduce as soon as its
// last range is final.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cnn/communicator.hpp"
#include "cnn/gradient_ready.hpp"
#include "cnn/timing_stats.hpp"

namespace cnn {

// seconds(bytes) = latency_s + bytes * seconds_per_byte.
struct AllreduceCost {
  double latency_s = 0.0;
  double seconds_per_byte = 0.0;
  double seconds(double bytes) const { return latency_s + bytes * seconds_per_byte; }
};

// Least squares over (bytes, seconds) samples, clamped to non-negative terms. Needs two distinct sizes
// for both terms; with one, all of it is latency.
AllreduceCost fit_allreduce_cost(const std::vector<double>& bytes, const std::vector<double>& seconds);

// One allreduce: a contiguous range of the buffer, started once ready point `last_point` is reached
// (-1: at all_gradients_ready()).
struct GradientBucket {
  std::int64_t offset = 0;
  std::int64_t count = 0;
  int last_point = -1;
};

struct BucketPlan {
  std::vector<GradientBucket> buckets;
  double predicted_exposed_s = 0.0;  // allreduce time left after the compute (this plan)
  double predicted_serial_s = 0.0;   // one allreduce of everything after the compute
  std::uint32_t cuts = 0;            // bit i: a bucket ends at ready point i (see plan_with_cuts)
  std::string describe() const;      // "2 buckets (1.7 MB at fc ready, 6.4 kB at end), ..."
};

// `points` in the order the backward finishes them, covering [0, total) (else: one bucket at the end).
BucketPlan plan_buckets(const std::vector<GradientReadyPoint>& points, std::int64_t total, const AllreduceCost& cost);
// The grouping `cuts` of plan_buckets (so that ranks can agree on rank 0's choice), with its
// predictions; one bucket at the end when the grouping is not possible.
BucketPlan plan_with_cuts(const std::vector<GradientReadyPoint>& points, std::int64_t total, const AllreduceCost& cost,
                          std::uint32_t cuts);

// The listener the trainer hands to Backend::compute_gradients_overlapped: starts each bucket of the
// plan on `comm` as soon as it is complete, the rest at the end, then waits (wait_all).
class OverlapReducer final : public GradientReadyListener {
 public:
  OverlapReducer(Communicator& comm, float* grads, std::int64_t total);
  void set_plan(BucketPlan plan);
  const BucketPlan& plan() const { return plan_; }

  void gradients_ready(std::int64_t offset, std::int64_t count) override;
  void all_gradients_ready() override;
  void make_progress() override { comm_.progress(); }
  bool reduces_early() const override;
  bool stream_ordered() const override { return comm_.stream_ordered(); }
  std::uint64_t generation() const override { return generation_; }

  // Host seconds spent in all_gradients_ready() since the last call: the allreduce phase of the
  // step's timing (the exposed wait on the host; ~0 for stream-ordered communicators).
  double take_host_wait_seconds();

 private:
  // compute_done: called from all_gradients_ready (Communicator::finish_allreduce_sum).
  void start(std::size_t bucket, bool compute_done);

  Communicator& comm_;
  float* grads_;
  std::int64_t total_;
  BucketPlan plan_;
  std::vector<bool> started_;
  int points_seen_ = 0;
  std::uint64_t generation_ = 1;
  double host_wait_ = 0.0;
};

// Collective: the mean over ranks of each rank's async allreduce times (steps: the fewest sampled).
AsyncAllreduceTimes mean_over_ranks(const MpiWorld& world, const AsyncAllreduceTimes& mine);

// allreduce.csv's row for overlapped steps: mean_s (and the bandwidths) from the allreduces' own
// duration per sampled step, exposed_s and overlap_fraction from what the steps waited. Without
// samples the row keeps the plain figures (the host-measured allreduce phase).
AllreduceStats with_overlap(AllreduceStats stats, const AsyncAllreduceTimes& mean, int buckets);

}  // namespace cnn
