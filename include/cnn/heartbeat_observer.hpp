// The stall watchdog's view of the loop (watchdog.hpp): owns the watchdog thread for as long as the
// loop runs, and marks the loop's phases with heartbeats. The phases inside a step (forward/backward,
// allreduce, check, update), the evaluation's and the checkpoint's are marked where they run.
#pragma once

#include <optional>
#include <string>

#include "cnn/test_hooks.hpp"
#include "cnn/training_observer.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

class HeartbeatObserver final : public TrainingObserver {
 public:
  // Starts the watchdog (--stall-timeout; 0: none). `stall`: the test hook CNN_TEST_STALL.
  HeartbeatObserver(double stall_timeout, int rank, const std::string& host,
                    const std::optional<TestHooks::StallAt>& stall)
      : watchdog_(stall_timeout, rank, host, stall) {}

  void on_step_begin(const StepEvent& e) override { heartbeat_step(e.global_step + 1); }
  // From here the rank waits for the others: the stop agreement and the epoch's reductions.
  void on_step_end(const StepEvent&) override { heartbeat(WatchPhase::kStepEnd); }
  void on_phase_begin(LoopPhase phase) override {
    if (phase == LoopPhase::kData) heartbeat(WatchPhase::kData);
  }
  void on_phase_end(LoopPhase phase) override {
    if (phase == LoopPhase::kDrain) heartbeat(WatchPhase::kStepEnd);
  }

 private:
  Watchdog watchdog_;
};

}  // namespace cnn
