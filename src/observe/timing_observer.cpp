#include "cnn/timing_observer.hpp"

#include "cnn/gradient_overlap.hpp"

namespace cnn {
namespace {

// Each phase's seconds this epoch, reduced over ranks: min, mean, max and the slowest rank.
std::vector<PhaseSpread> reduce_phases(const MpiWorld& world, const PhaseTimes& mine) {
  std::vector<PhaseSpread> spreads;
  for (int p = 0; p < kPhaseCount; ++p) {
    const RankSpread r = reduce_over_ranks(world, mine.seconds[static_cast<std::size_t>(p)]);
    if (world.rank() != 0) continue;
    PhaseSpread s;
    s.phase = static_cast<Phase>(p);
    s.min = r.min;
    s.mean = r.mean;
    s.max = r.max;
    s.max_rank = r.max_rank;
    spreads.push_back(s);
  }
  return spreads;
}

}  // namespace

void TimingObserver::on_epoch_start(const EpochEvent&) {
  world_.barrier();  // every rank's epoch starts together, so the slowest one's time is the epoch's
  epoch_start_ = wall_seconds();
}

void TimingObserver::on_step_begin(const StepEvent&) { step_start_ = wall_seconds(); }

void TimingObserver::on_step_end(const StepEvent&) {
  step_seconds_ += wall_seconds() - step_start_;
  ++epoch_steps_;
}

void TimingObserver::on_phase_begin(LoopPhase phase) {
  if (phase == LoopPhase::kDrain) drain_start_ = wall_seconds();
}

void TimingObserver::on_phase_end(LoopPhase phase) {
  if (phase == LoopPhase::kDrain) {
    step_seconds_ += wall_seconds() - drain_start_;  // device work queued by the steps is step time too
    epoch_seconds_ = world_.allreduce_max(wall_seconds() - epoch_start_);
    step_spread_ = reduce_over_ranks(world_, step_seconds_);
    steps_ = epoch_steps_;
    step_seconds_ = 0.0;
    epoch_steps_ = 0;
  } else if (phase == LoopPhase::kEval) {
    times_ += backend_.take_phase_times();
  }
}

void TimingObserver::on_epoch_end(EpochMetrics& metrics) {
  metrics.epoch_seconds = epoch_seconds_;
  metrics.images_per_second = static_cast<double>(train_images_) / epoch_seconds_;
  metrics.wall_seconds = wall_seconds() - run_start_;
  phases_ = reduce_phases(world_, times_);
  overlap_times_ = mean_over_ranks(world_, comm_.take_async_times());
  times_ = PhaseTimes{};  // the epoch-end checkpoint is counted in the next epoch's row
}

}  // namespace cnn
