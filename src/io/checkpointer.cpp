#include "cnn/checkpointer.hpp"

#include <cstdio>

#include "cnn/collective_errors.hpp"
#include "cnn/signals.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

Checkpointer::Checkpointer(const MpiWorld& world, const CheckpointerOptions& options, CheckpointConfig saved_config,
                           const ParamLayout& layout, std::string run_id)
    : world_(world),
      dir_(options.run_dir),
      saved_config_(std::move(saved_config)),
      run_id_(std::move(run_id)),
      layout_(layout),
      every_epochs_(options.every_epochs),
      every_steps_(options.every_steps),
      epochs_(options.epochs),
      keep_(options.keep),
      verbose_(options.verbose) {}

bool Checkpointer::due_after_step(std::int64_t global_step) const {
  return every_steps_ > 0 && global_step % every_steps_ == 0;
}

bool Checkpointer::due_after_epoch(std::int64_t epochs_done, std::int64_t global_step) const {
  return epochs_done >= epochs_ || (every_epochs_ > 0 && epochs_done % every_epochs_ == 0) ||
         due_after_step(global_step);
}

std::string Checkpointer::save(Backend& backend, const CheckpointProgress& progress,
                               const CheckpointMetrics& metrics, PhaseTimes& times) const {
  backend.synchronize();
  const double start = wall_seconds();
  std::string path;
  heartbeat(world_.rank() == 0 ? WatchPhase::kCheckpoint : WatchPhase::kCheckpointWait);
  agree_or_stop(world_, [&] {
    if (world_.rank() != 0) return;
    CheckpointState state;
    state.config = saved_config_;
    state.run_id = run_id_;
    state.progress = progress;
    state.progress.world_size_at_save = world_.size();
    state.metrics = metrics;
    state.params = backend.download_params();
    state.optimizer_state = backend.download_optimizer_state();
    state.optimizer_step = progress.global_step;  // one update per step
    state.bn_running = backend.download_state();  // rank 0's (the same on every rank unless --bn-local)
    path = dir_.save(state, layout_, keep_);
  });
  const double seconds = wall_seconds() - start;
  times.add(Phase::kCheckpoint, seconds);
  if (world_.rank() == 0 && verbose_) {
    std::printf("checkpoint: %s (%.1f ms)\n", path.c_str(), 1e3 * seconds);
    std::fflush(stdout);
  }
  return path;
}

void stop_for_signal(const MpiWorld& world, int signo, std::int64_t epoch, std::int64_t step,
                     const std::string& path) {
  if (world.rank() == 0) {
    std::fflush(stdout);
    std::fprintf(stderr, "stopped by %s at epoch %lld step %lld; checkpoint %s\n", signal_name(signo),
                 static_cast<long long>(epoch), static_cast<long long>(step), path.c_str());
    std::fflush(stderr);
  }
  throw AlreadyReported(ExitCode::kStoppedBySignal);
}

}  // namespace cnn
