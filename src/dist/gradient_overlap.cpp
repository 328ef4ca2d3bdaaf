#include "cnn/gradient_overlap.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "cnn/errors.hpp"
#include "cnn/phase_times.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

namespace {

std::string bytes_text(double bytes) {
  char text[32];
  if (bytes >= 1e6) std::snprintf(text, sizeof(text), "%.2f MB", bytes / 1e6);
  else std::snprintf(text, sizeof(text), "%.1f kB", bytes / 1e3);
  return text;
}

// One candidate: groups[g] = index of the last point in group g (increasing, the last = points-1).
// Returns false when a group's ranges are not one contiguous range.
bool buckets_for(const std::vector<GradientReadyPoint>& points, const std::vector<int>& group_ends,
                 std::vector<GradientBucket>& out) {
  out.clear();
  int begin = 0;
  for (int end : group_ends) {
    std::vector<GradientReadyPoint> group(points.begin() + begin, points.begin() + end + 1);
    std::sort(group.begin(), group.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
    for (std::size_t i = 1; i < group.size(); ++i)
      if (group[i - 1].offset + group[i - 1].count != group[i].offset) return false;
    GradientBucket b;
    b.offset = group.front().offset;
    b.count = group.back().offset + group.back().count - b.offset;
    b.last_point = end == static_cast<int>(points.size()) - 1 ? -1 : end;
    out.push_back(b);
    begin = end + 1;
  }
  return true;
}

// Reductions run one after another; bucket g starts when its last point is ready and the previous
// one is done. Time 0 is the first point; the compute ends at points[0].seconds_after.
double exposed_seconds(const std::vector<GradientReadyPoint>& points, const std::vector<int>& group_ends,
                       const std::vector<GradientBucket>& buckets, const AllreduceCost& cost) {
  const double compute_end = points.front().seconds_after;
  double channel_free = 0.0;
  for (std::size_t g = 0; g < buckets.size(); ++g) {
    const double ready = compute_end - points[static_cast<std::size_t>(group_ends[g])].seconds_after;
    const double start = std::max(ready, channel_free);
    channel_free = start + cost.seconds(static_cast<double>(buckets[g].count) * sizeof(float));
  }
  return std::max(0.0, channel_free - compute_end);
}

}  // namespace

AllreduceCost fit_allreduce_cost(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  AllreduceCost cost;
  const std::size_t n = std::min(bytes.size(), seconds.size());
  if (n == 0) return cost;
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mx += bytes[i] / static_cast<double>(n);
    my += seconds[i] / static_cast<double>(n);
  }
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sxx += (bytes[i] - mx) * (bytes[i] - mx);
    sxy += (bytes[i] - mx) * (seconds[i] - my);
  }
  cost.seconds_per_byte = sxx > 0.0 ? std::max(0.0, sxy / sxx) : 0.0;
  cost.latency_s = std::max(0.0, my - cost.seconds_per_byte * mx);
  return cost;
}

BucketPlan plan_with_cuts(const std::vector<GradientReadyPoint>& points, std::int64_t total, const AllreduceCost& cost,
                          std::uint32_t cuts) {
  BucketPlan plan;
  plan.predicted_serial_s = cost.seconds(static_cast<double>(total) * sizeof(float));
  plan.buckets.assign(1, GradientBucket{0, total, -1});
  plan.predicted_exposed_s = plan.predicted_serial_s;
  std::int64_t covered = 0;
  for (const GradientReadyPoint& p : points) covered += p.count;
  const int k = static_cast<int>(points.size());
  if (k == 0 || covered != total || k > 16 || cuts >= (1u << (k - 1))) return plan;
  std::vector<int> ends;
  for (int i = 0; i < k - 1; ++i)
    if (cuts & (1u << i)) ends.push_back(i);
  ends.push_back(k - 1);
  std::vector<GradientBucket> buckets;
  if (!buckets_for(points, ends, buckets)) return plan;
  plan.buckets = buckets;
  plan.predicted_exposed_s = exposed_seconds(points, ends, buckets, cost);
  plan.cuts = cuts;
  return plan;
}

BucketPlan plan_buckets(const std::vector<GradientReadyPoint>& points, std::int64_t total, const AllreduceCost& cost) {
  BucketPlan best = plan_with_cuts(points, total, cost, 0);  // one bucket over every point, at the end
  const int k = static_cast<int>(points.size());
  if (k < 2 || k > 16) return best;
  // Every grouping of consecutive points (2^(k-1) of them; k is 2 for the seed model). Ties go to
  // fewer buckets (fewer launches; the same bits either way).
  for (std::uint32_t cuts = 1; cuts < (1u << (k - 1)); ++cuts) {
    const BucketPlan candidate = plan_with_cuts(points, total, cost, cuts);
    if (candidate.cuts != cuts) continue;  // not a valid grouping
    if (candidate.predicted_exposed_s < best.predicted_exposed_s - 1e-9 ||
        (candidate.predicted_exposed_s <= best.predicted_exposed_s + 1e-9 &&
         candidate.buckets.size() < best.buckets.size()))
      best = candidate;
  }
  return best;
}

std::string BucketPlan::describe() const {
  std::ostringstream text;
  text << buckets.size() << (buckets.size() == 1 ? " bucket (" : " buckets (");
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    if (b) text << ", ";
    text << bytes_text(static_cast<double>(buckets[b].count) * sizeof(float))
         << (buckets[b].last_point < 0 ? " at end" : " at ready point " + std::to_string(buckets[b].last_point));
  }
  char tail[96];
  std::snprintf(tail, sizeof(tail), "), predicted exposed %.1f us of %.1f us", 1e6 * predicted_exposed_s,
                1e6 * predicted_serial_s);
  text << tail;
  return text.str();
}

OverlapReducer::OverlapReducer(Communicator& comm, float* grads, std::int64_t total)
    : comm_(comm), grads_(grads), total_(total) {
  set_plan(BucketPlan{{GradientBucket{0, total, -1}}, 0.0, 0.0});
}

void OverlapReducer::set_plan(BucketPlan plan) {
  std::int64_t covered = 0;
  for (const GradientBucket& b : plan.buckets) covered += b.count;
  if (covered != total_) throw Error(ExitCode::kFailure, "internal error: a bucket plan that does not cover the gradients");
  plan_ = std::move(plan);
  started_.assign(plan_.buckets.size(), false);
  points_seen_ = 0;
  ++generation_;
}

bool OverlapReducer::reduces_early() const {
  return std::any_of(plan_.buckets.begin(), plan_.buckets.end(), [](const GradientBucket& b) { return b.last_point >= 0; });
}

void OverlapReducer::start(std::size_t bucket, bool compute_done) {
  started_[bucket] = true;
  float* data = grads_ + plan_.buckets[bucket].offset;
  if (compute_done) comm_.finish_allreduce_sum(data, plan_.buckets[bucket].count);
  else comm_.start_allreduce_sum(data, plan_.buckets[bucket].count);
}

void OverlapReducer::gradients_ready(std::int64_t, std::int64_t) {
  const int point = points_seen_++;
  for (std::size_t b = 0; b < plan_.buckets.size(); ++b)
    if (!started_[b] && plan_.buckets[b].last_point == point) start(b, false);
}

void OverlapReducer::all_gradients_ready() {
  const double begin = wall_seconds();
  for (std::size_t b = 0; b < plan_.buckets.size(); ++b)
    if (!started_[b]) start(b, true);
  heartbeat(WatchPhase::kAllreduce);  // from here on this rank waits for its peers (watchdog.hpp)
  comm_.wait_all();
  started_.assign(plan_.buckets.size(), false);
  points_seen_ = 0;
  host_wait_ += wall_seconds() - begin;
}

double OverlapReducer::take_host_wait_seconds() {
  const double s = host_wait_;
  host_wait_ = 0.0;
  return s;
}

AsyncAllreduceTimes mean_over_ranks(const MpiWorld& world, const AsyncAllreduceTimes& mine) {
  double sums[2] = {mine.comm_seconds, mine.exposed_seconds};
  world.allreduce_sum(sums, 2);
  AsyncAllreduceTimes mean;
  mean.comm_seconds = sums[0] / world.size();
  mean.exposed_seconds = sums[1] / world.size();
  mean.steps = world.allreduce_min(static_cast<int>(mine.steps));
  return mean;
}

AllreduceStats with_overlap(AllreduceStats a, const AsyncAllreduceTimes& mean, int buckets) {
  a.overlap = 1;
  a.buckets = buckets;
  if (mean.steps <= 0 || mean.comm_seconds <= 0.0) return a;
  a.mean_s = mean.comm_seconds / static_cast<double>(mean.steps);
  a.exposed_s = std::min(a.mean_s, mean.exposed_seconds / static_cast<double>(mean.steps));
  a.overlap_fraction = 1.0 - a.exposed_s / a.mean_s;
  a.algbw_GBps = static_cast<double>(a.bytes_per_step) / a.mean_s / 1e9;
  a.busbw_GBps = a.algbw_GBps * 2.0 * static_cast<double>(a.ranks - 1) / static_cast<double>(a.ranks);
  return a;
}

}  // namespace cnn
