#include "cnn/run_log_observer.hpp"

#include "cnn/watchdog.hpp"

namespace cnn {

void RunLogObserver::on_epoch_end(EpochMetrics& metrics) {
  if (rank_ != 0) return;
  heartbeat(WatchPhase::kLog);
  const std::vector<PhaseSpread>& phases = timing_.phases();
  log_.append_epoch(metrics, phases, timing_.step_spread());
  if (ranks_ > 1) {
    AllreduceStats stats = allreduce_stats(metrics.epoch, ranks_, gradient_bytes_, timing_.steps(),
                                           phases[static_cast<std::size_t>(Phase::kAllreduce)].mean);
    if (overlap_ != nullptr)
      stats = with_overlap(stats, timing_.overlap_times(), static_cast<int>(overlap_->plan().buckets.size()));
    log_.append_allreduce(stats);
  }
}

}  // namespace cnn
