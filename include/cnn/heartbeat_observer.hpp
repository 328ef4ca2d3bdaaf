// The stall watchdog's view of the loop (watchdog.hpp): owns the watchdog thread for as long as the
// loop runs, and marks the loop's phases with heartbeats. The phases inside a step (forward/backward,
// allreduce, check, update), the evaluation's and the checkpoint's are marked where they run.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cnn/communicator.hpp"
#include "cnn/peer_probe.hpp"
#include "cnn/test_hooks.hpp"
#include "cnn/training_observer.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

class HeartbeatObserver final : public TrainingObserver {
 public:
  // Starts the watchdog (--stall-timeout; 0: none). `stall`: the test hook CNN_TEST_STALL. Collective
  // with 2+ ranks: the ranks swap the addresses of their peer probes (peer_probe.hpp).
  HeartbeatObserver(const MpiWorld& world, double stall_timeout, const std::optional<TestHooks::StallAt>& stall)
      : peers_(world.size() > 1 ? std::make_unique<PeerProbe>(world) : nullptr),
        watchdog_(stall_timeout, world.rank(), world.host(), stall, peers_.get()) {}

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
  std::unique_ptr<PeerProbe> peers_;  // before the watchdog, which uses it until it stops
  Watchdog watchdog_;
};

}  // namespace cnn
