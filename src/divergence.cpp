#include "cnn/divergence.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <vector>

#include "cnn/collective_errors.hpp"
#include "cnn/errors.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

namespace {

struct NanHook {
  long rank = -1;
  std::int64_t step = 0;  // 0: no hook
};

// CNN_TEST_NAN_AT=RANK:STEP (test hook).
NanHook nan_hook_from_environment() {
  const char* text = std::getenv("CNN_TEST_NAN_AT");
  if (text == nullptr) return {};
  char* end = nullptr;
  const long hook_rank = std::strtol(text, &end, 10);
  if (end == text || *end != ':') return {};
  const long long step = std::strtoll(end + 1, nullptr, 10);
  if (step <= 0) return {};
  return {hook_rank, step};
}

}  // namespace

NonFinitePolicy parse_nonfinite_policy(const std::string& text) {
  if (text == "stop") return NonFinitePolicy::kStop;
  if (text == "skip") return NonFinitePolicy::kSkip;
  throw UsageError("--on-nonfinite: unknown policy '" + text + "' (available: stop, skip)");
}

std::string param_name_at(const ParamLayout& layout, std::int64_t index) {
  for (const ParamView& view : layout.views())
    if (index >= view.offset && index < view.offset + view.size) return view.name();
  return "?";
}

DivergenceGuard::DivergenceGuard(NonFinitePolicy policy, const ParamLayout& layout, const MpiWorld* world, int rank)
    : policy_(policy), layout_(layout), world_(world), rank_(rank) {
  const NanHook hook = nan_hook_from_environment();
  nan_hook_step_ = hook.step;
  nan_hook_injects_here_ = hook.step != 0 && hook.rank == rank;
}

void DivergenceGuard::begin_step(Backend& backend, std::int64_t steps_done) {
  step_ = steps_done + 1;
  // Only skip needs the step's own stats apart (a device sync on cuda, so not on stop's fast path).
  if (policy_ == NonFinitePolicy::kSkip) banked_ += backend.take_train_stats();
}

void DivergenceGuard::after_compute(Backend& backend) const {
  if (!nan_hook_injects_here_ || step_ != nan_hook_step_) return;
  // The last element of fc.bias in the seed layout; any element would do, this one names a layer.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::int64_t index = layout_.total() - 1;
  if (backend.memory_space() != MemorySpace::kHost)
    throw Error(ExitCode::kFailure, "the test hook CNN_TEST_NAN_AT works with host-memory backends only");
  backend.grads()[index] = nan;
}

bool DivergenceGuard::update_allowed(Backend& backend, Range mine, bool reduced_over_ranks) {
  heartbeat(WatchPhase::kNonFiniteCheck);
  const std::int64_t reduced_index = backend.first_nonfinite_grad();
  if (reduced_index < 0) return true;  // the fast path: every rank saw the same finite buffer

  // The failure path, reached by every rank at the same step. Who saw it in their own gradient?
  std::int64_t local_index = reduced_index;
  if (reduced_over_ranks) {
    backend.compute_gradients(mine.begin, mine.count);  // deterministic: the same local sum again
    after_compute(backend);
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
  message << "non-finite gradient in global step " << step_ << " (1-based), layer " << layer << ", ";
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
