#include "cpu_backend_base.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace cnn {

CpuBackendBase::CpuBackendBase(std::string kind, int threads, const ParamLayout& layout, OptimizerKind optimizer)
    : kind_(std::move(kind)),
      threads_(std::max(1, threads)),
      total_(layout.total()),
      params_(static_cast<std::size_t>(total_)),
      grads_(static_cast<std::size_t>(total_)),
      optimizer_state_(static_cast<std::size_t>(total_ * optimizer_state_per_param(optimizer))) {
  for (int t = 0; t < threads_; ++t) thread_grads_.emplace_back(static_cast<std::size_t>(total_));
  thread_times_.resize(static_cast<std::size_t>(threads_));
}

std::string CpuBackendBase::device_description() const {
  return std::to_string(threads_) + (threads_ == 1 ? " CPU thread" : " CPU threads");
}

void CpuBackendBase::bind_data(const Dataset& train, const Dataset& test) {
  train_ = &train;
  test_ = &test;
}

CpuBackendBase::Range CpuBackendBase::thread_share(std::int64_t n, int t) const {
  const std::int64_t begin = n * t / threads_, end = n * (t + 1) / threads_;
  return {begin, end - begin};
}

void CpuBackendBase::compute_gradients(std::int64_t first, std::int64_t count) {
  const double start = wall_seconds();
  std::vector<BatchStats> stats(static_cast<std::size_t>(threads_));
  for_each_thread([&](int t) {
    const Range share = thread_share(count, t);
    float* g = thread_grads_[static_cast<std::size_t>(t)].data();
    std::fill(g, g + total_, 0.0f);
    for (std::int64_t done = 0; done < share.count; done += kCpuMicroBatch) {
      const std::int64_t mb = std::min(kCpuMicroBatch, share.count - done);
      train_micro_batch(permutation_.data() + first + share.begin + done, mb, g, t, stats[static_cast<std::size_t>(t)],
                        thread_times_[static_cast<std::size_t>(t)]);
    }
  });
  const double reduce_start = wall_seconds();
  sum_thread_gradients();
  for (const BatchStats& s : stats) train_stats_ += s;
  record_thread_times(wall_seconds() - reduce_start, wall_seconds() - start);
}

void CpuBackendBase::apply_update(const OptimizerSettings& settings, float grad_scale) {
  const double start = wall_seconds();
  // Each thread updates a contiguous block; elements are independent, so the result does not
  // depend on the thread count.
  for_each_thread([&](int t) {
    const Range share = thread_share(total_, t);
    apply_optimizer(settings, params_.data(), optimizer_state_.data(), grads_.data(), total_, share.begin, share.count,
                    grad_scale);
  });
  phase_times_.add(Phase::kUpdate, wall_seconds() - start);
}

BatchStats CpuBackendBase::take_train_stats() {
  BatchStats s = train_stats_;
  train_stats_ = {};
  return s;
}

BatchStats CpuBackendBase::evaluate(std::int64_t first, std::int64_t count) {
  const double start = wall_seconds();
  std::vector<BatchStats> stats(static_cast<std::size_t>(threads_));
  for_each_thread([&](int t) {
    const Range share = thread_share(count, t);
    std::vector<std::int32_t> indices(kCpuMicroBatch);
    for (std::int64_t done = 0; done < share.count; done += kCpuMicroBatch) {
      const std::int64_t mb = std::min(kCpuMicroBatch, share.count - done);
      for (std::int64_t s = 0; s < mb; ++s) indices[s] = static_cast<std::int32_t>(first + share.begin + done + s);
      evaluate_micro_batch(indices.data(), mb, t, stats[static_cast<std::size_t>(t)]);
    }
  });
  BatchStats total;
  for (const BatchStats& s : stats) total += s;
  phase_times_.add(Phase::kEval, wall_seconds() - start);
  return total;
}

PhaseTimes CpuBackendBase::take_phase_times() {
  PhaseTimes t = phase_times_;
  phase_times_ = {};
  return t;
}

// Split over the threads by element; each element is summed in thread order whatever the split.
void CpuBackendBase::sum_thread_gradients(std::int64_t begin, std::int64_t end) {
  for_each_thread([&](int t) {
    Range share = thread_share(end - begin, t);
    share.begin += begin;
    float* out = grads_.data() + share.begin;
    std::memcpy(out, thread_grads_[0].data() + share.begin, static_cast<std::size_t>(share.count) * sizeof(float));
    for (int u = 1; u < threads_; ++u) {
      const float* in = thread_grads_[static_cast<std::size_t>(u)].data() + share.begin;
#pragma omp simd
      for (std::int64_t i = 0; i < share.count; ++i) out[i] += in[i];
    }
  });
}

// Phases inside the parallel region are the mean over threads, scaled to fill the region's wall time
// (thread start-up and waits for the slowest thread included), so that the phases of a step add up
// to its wall time (docs/LOGS.md). The final reduction counts as backward.
void CpuBackendBase::record_thread_times(double reduce_seconds, double total_seconds) {
  ThreadTimes mean;
  for (ThreadTimes& t : thread_times_) {
    mean.data += t.data / threads_;
    mean.forward += t.forward / threads_;
    mean.backward += t.backward / threads_;
    t = {};
  }
  const double measured = mean.data + mean.forward + mean.backward;
  const double region = total_seconds - reduce_seconds;
  const double scale = measured > 0.0 && region > 0.0 ? region / measured : 1.0;
  phase_times_.add(Phase::kData, mean.data * scale);
  phase_times_.add(Phase::kForward, mean.forward * scale);
  phase_times_.add(Phase::kBackward, mean.backward * scale + reduce_seconds);
}

}  // namespace cnn
