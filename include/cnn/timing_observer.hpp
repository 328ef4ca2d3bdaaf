// The epoch's times (timing.csv, metrics.csv's seconds and images/s, allreduce.csv): each step's wall
// time, the epoch's, and the phase times the step, the evaluation and the checkpoints add up,
// reduced over ranks at the epoch's end (collectives, in the same order on every rank).
#pragma once

#include <vector>

#include "cnn/backend.hpp"
#include "cnn/communicator.hpp"
#include "cnn/timing_stats.hpp"
#include "cnn/training_observer.hpp"

namespace cnn {

class TimingObserver final : public TrainingObserver {
 public:
  // `times`: the run's phase seconds, which train_step and the checkpointer add to as well.
  // `train_images`: an epoch's, for images/s; `run_start`: wall_seconds() when train() began.
  TimingObserver(const MpiWorld& world, Backend& backend, Communicator& comm, PhaseTimes& times,
                 std::int64_t train_images, double run_start)
      : world_(world), backend_(backend), comm_(comm), times_(times), train_images_(train_images),
        run_start_(run_start) {}

  void on_epoch_start(const EpochEvent&) override;
  void on_step_begin(const StepEvent&) override;
  void on_step_end(const StepEvent&) override;
  void on_phase_begin(LoopPhase phase) override;
  void on_phase_end(LoopPhase phase) override;
  void on_epoch_end(EpochMetrics& metrics) override;

  // The last epoch's, valid from its on_epoch_end (the phases and spreads on rank 0 only).
  const std::vector<PhaseSpread>& phases() const { return phases_; }
  const RankSpread& step_spread() const { return step_spread_; }
  const AsyncAllreduceTimes& overlap_times() const { return overlap_times_; }
  std::int64_t steps() const { return steps_; }

 private:
  const MpiWorld& world_;
  Backend& backend_;
  Communicator& comm_;
  PhaseTimes& times_;
  std::int64_t train_images_;
  double run_start_;
  double epoch_start_ = 0.0;
  double step_start_ = 0.0;
  double drain_start_ = 0.0;
  double step_seconds_ = 0.0;   // this epoch's steps' wall time on this rank (timing.csv's "step" row)
  std::int64_t epoch_steps_ = 0;
  double epoch_seconds_ = 0.0;  // the slowest rank's, from the barrier at the epoch's start
  std::int64_t steps_ = 0;      // the last epoch's steps run here (allreduce.csv)
  RankSpread step_spread_;
  std::vector<PhaseSpread> phases_;
  AsyncAllreduceTimes overlap_times_;
};

}  // namespace cnn
