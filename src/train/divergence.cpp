#include "cnn/divergence.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <vector>

#include "cnn/collective_errors.hpp"
#include "cnn/errors.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

std::string param_name_at(const ParamLayout& layout, std::int64_t index) {
  for (const ParamView& view : layout.views())
    if (index >= view.offset && index < view.offset + view.size) return view.name();
  return "?";
}

DivergenceGuard::DivergenceGuard(NonFinitePolicy policy, const ParamLayout& layout, const MpiWorld* world, int rank,
                                 const std::optional<TestHooks::NanAt>& nan_at)
    : policy_(policy), layout_(layout), world_(world), rank_(rank) {
  if (nan_at) {
    nan_hook_step_ = nan_at->step;
    nan_hook_injects_here_ = nan_at->rank == rank;
  }
}

void DivergenceGuard::begin_step(Backend& backend, std::int64_t steps_done) {
  step_ = steps_done + 1;
  // Only skip needs the step's own stats apart (a device sync on cuda, so not on stop's fast path).
  if (policy_ == NonFinitePolicy::kSkip) banked_ += backend.take_train_stats();
}

void DivergenceGuard::after_exchange(Backend& backend) const {
  // Every rank writes the NaN into its reduced buffer: the sum over ranks carries a NaN of any one
  // rank to all of them (NaN + x = NaN), so this is the buffer the exchange of the hook rank's NaN
  // gives, on either path (overlapped or not) and without touching the exchange itself.
  if (nan_hook_step_ != 0 && step_ == nan_hook_step_) poison_for_test(backend);
}

void DivergenceGuard::inject_test_nan(Backend& backend, std::int64_t step) const {
  if (nan_hook_injects_here_ && step == nan_hook_step_) poison_for_test(backend);
}

void DivergenceGuard::poison_for_test(Backend& backend) const {
  // The last element of the layout (the last layer's bias); any element would do, this one names a layer.
  backend.set_grad_for_test(layout_.total() - 1, std::numeric_limits<float>::quiet_NaN());
}

bool DivergenceGuard::update_allowed(Backend& backend, Range mine, bool reduced_over_ranks) {
  heartbeat(WatchPhase::kNonFiniteCheck);
  // Stop on a device backend: the verdict is read a step late, so the GPU never idles for it. The
  // device skips a flagged step's update by itself, so the parameters stay those before that step
  // until settle() reports it (in the next step, before a checkpoint or a re-bind, at the epoch's end).
  if (policy_ == NonFinitePolicy::kStop) {
    settle(backend);
    if (backend.enqueue_nonfinite_check()) {
      pending_ = PendingCheck{true, step_, mine, reduced_over_ranks};
      return true;
    }
  }
  const std::int64_t reduced_index = backend.first_nonfinite_grad();
  if (reduced_index < 0) return true;  // the fast path: every rank saw the same finite buffer
  return on_nonfinite(backend, reduced_index, step_, mine, reduced_over_ranks);
}

void DivergenceGuard::settle(Backend& backend) {
  if (!pending_.active) return;
  const PendingCheck check = pending_;
  pending_ = PendingCheck{};
  heartbeat(WatchPhase::kNonFiniteCheck);
  const std::int64_t reduced_index = backend.enqueued_nonfinite_result();
  if (reduced_index < 0) return;
  on_nonfinite(backend, reduced_index, check.step, check.mine, check.reduced_over_ranks);
}

std::int64_t DivergenceGuard::nan_hook_index(std::int64_t steps_done, std::int64_t steps) const {
  const std::int64_t index = nan_hook_step_ - 1 - steps_done;  // the hook's step is 1-based
  return nan_hook_step_ != 0 && index >= 0 && index < steps ? index : -1;
}

void DivergenceGuard::on_chunk_nonfinite(Backend& backend, std::int64_t steps_done, std::int64_t index, Range mine) {
  heartbeat(WatchPhase::kNonFiniteCheck);
  // Several ranks: the chunk checked the sum over ranks, as the one-step loop does after its exchange.
  const bool reduced_over_ranks = world_ != nullptr && world_->size() > 1;
  on_nonfinite(backend, index, steps_done + 1, mine, reduced_over_ranks);
}

// The failure path, reached by every rank for the same step (each saw the same reduced buffer).
// Returns false (skip) or throws (stop).
bool DivergenceGuard::on_nonfinite(Backend& backend, std::int64_t reduced_index, std::int64_t step, Range mine,
                                   bool reduced_over_ranks) {
  // Who saw it in their own gradient? The parameters are still those before `step` (its update was
  // not applied), so recomputing this rank's slice gives the same local sum again (deterministic).
  std::int64_t local_index = reduced_index;
  if (reduced_over_ranks) {
    backend.compute_gradients(mine.begin, mine.count);
    inject_test_nan(backend, step);
    local_index = backend.first_nonfinite_grad();
  }
  std::vector<double> seen;
  if (world_ != nullptr && world_->size() > 1) {
    seen = world_->gather_to_root(static_cast<double>(local_index));
  } else {
    seen.push_back(static_cast<double>(local_index));
  }

  if (policy_ == NonFinitePolicy::kSkip) {
    backend.take_train_stats();  // the dropped step's loss (NaN) stays out of the epoch's
    ++skipped_total_;
    ++skipped_since_take_;
  }
  if (rank_ != 0) {
    if (policy_ == NonFinitePolicy::kSkip) return false;
    throw AlreadyReported(ExitCode::kDiverged);
  }
  std::ostringstream ranks;
  std::string layer = param_name_at(layout_, reduced_index);
  int count = 0;
  for (std::size_t r = 0; r < seen.size(); ++r) {
    if (seen[r] < 0) continue;
    ranks << (count++ ? "," : "") << r;
    if (count == 1) layer = param_name_at(layout_, static_cast<std::int64_t>(seen[r]));
  }
  std::ostringstream message;
  message << "non-finite gradient in global step " << step << " (1-based), layer " << layer << ", ";
  if (count > 0) {
    message << "rank(s) " << ranks.str();
  } else {
    message << "no rank's own gradient: the allreduce's sum overflowed";
  }
  if (policy_ == NonFinitePolicy::kSkip) {
    std::fflush(stdout);
    std::fprintf(stderr, "warning: %s; update skipped on every rank (--on-nonfinite skip; %lld skipped so far)\n",
                 message.str().c_str(), static_cast<long long>(skipped_total_));
    std::fflush(stderr);
    return false;
  }
  print_error_line("training diverged: " + message.str() +
                   "; stopped before its update, so the newest checkpoint is the last good one (try a smaller "
                   "--lr, or --on-nonfinite skip)");
  throw AlreadyReported(ExitCode::kDiverged);
}

BatchStats DivergenceGuard::take_train_stats(Backend& backend) {
  BatchStats total = banked_;
  banked_ = BatchStats{};
  total += backend.take_train_stats();
  return total;
}

std::int64_t DivergenceGuard::take_skipped() {
  const std::int64_t n = skipped_since_take_;
  skipped_since_take_ = 0;
  return n;
}

void check_epoch_loss(const MpiWorld& world, std::int64_t epoch, double mean_train_loss) {
  if (std::isfinite(mean_train_loss)) return;
  if (world.rank() == 0) {
    std::ostringstream message;
    message << "training diverged in epoch " << epoch << ": mean train loss is " << mean_train_loss
            << " while every gradient was finite (try a smaller --lr)";
    print_error_line(message.str());
  }
  throw AlreadyReported(ExitCode::kDiverged);
}

}  // namespace cnn
