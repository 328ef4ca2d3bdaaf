// What rank 0 prints while the loop runs: the start-up time to the first step, the live progress line
// (progress.hpp) and each epoch's line ("epoch 2/5  train_loss ..."; with --quiet only the last).
#pragma once

#include <cstdint>
#include <cstdio>

#include "cnn/phase_times.hpp"
#include "cnn/progress.hpp"
#include "cnn/training_observer.hpp"

namespace cnn {

// "startup: X s to first step", at the first step this process runs (rank 0). First in the list, so
// the line is out before anything times the step.
class StartupLine final : public TrainingObserver {
 public:
  StartupLine(bool root, double process_start) : root_(root), process_start_(process_start) {}
  void on_step_begin(const StepEvent& e) override;

 private:
  bool root_;
  double process_start_;
};

class ProgressObserver final : public TrainingObserver {
 public:
  ProgressObserver(bool root, bool quiet, std::int64_t steps_per_epoch, int epochs, std::int64_t global_batch)
      : root_(root), quiet_(quiet), epochs_(epochs),
        live_(root ? progress_mode_for_stdout(quiet) : ProgressMode::kOff, stdout, steps_per_epoch, epochs,
              global_batch) {}

  void on_epoch_start(const EpochEvent& e) override { live_.begin_epoch(e.epoch, e.first_step, wall_seconds()); }
  void on_step_end(const StepEvent& e) override { live_.update(e.step + 1, wall_seconds()); }
  void on_phase_end(LoopPhase phase) override {
    if (phase == LoopPhase::kDrain) live_.end_epoch();
  }
  void on_epoch_end(EpochMetrics& metrics) override;

 private:
  bool root_;
  bool quiet_;
  int epochs_;
  ProgressLine live_;
};

}  // namespace cnn
