// The stall watchdog's view of the loop (watchdog.hpp): owns the watchdog thread for as long as the
// loop runs, and marks the loop's phases with heartbeats. The phases inside a step (forward/backward,
// allreduce, check, update), the evaluation's and the checkpoint's are marked where they run. It also
// sets up where the ranks' flight recorder rings go (flight_site.hpp) for the watchdog and for a
// failed collective.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cnn/communicator.hpp"
#include "cnn/flight_site.hpp"
#include "cnn/peer_probe.hpp"
#include "cnn/test_hooks.hpp"
#include "cnn/training_observer.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

class HeartbeatObserver final : public TrainingObserver {
 public:
  // Collective (the flight site, then the peer probes' addresses with 2+ ranks, peer_probe.hpp). Starts
  // the watchdog (--stall-timeout; 0: none). `run_dir`: --out. `stall`: the test hooks CNN_TEST_STALL
  // and CNN_TEST_SIGSTOP.
  HeartbeatObserver(const MpiWorld& world, const std::string& run_dir, double stall_timeout,
                    const std::optional<TestHooks::StallAt>& stall)
      : flight_(std::make_shared<const FlightSite>(set_up_flight_site(world, run_dir, stall_timeout))),
        install_(flight_),
        peers_(world.size() > 1 ? std::make_unique<PeerProbe>(world) : nullptr),
        watchdog_(stall_timeout, world.rank(), world.host(), stall, flight_, peers_.get()) {}

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
  std::shared_ptr<const FlightSite> flight_;
  FlightSiteInstall install_;         // a failed collective writes its ring there
  std::unique_ptr<PeerProbe> peers_;  // before the watchdog, which uses it until it stops
  Watchdog watchdog_;
};

}  // namespace cnn
