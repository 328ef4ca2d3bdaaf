#include "cnn/checkpointer.hpp"

#include <cstdio>
#include <optional>

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
      verbose_(options.verbose),
      writer_(dir_, layout, options.keep) {}

bool Checkpointer::due_after_step(std::int64_t global_step) const {
  return every_steps_ > 0 && global_step % every_steps_ == 0;
}

bool Checkpointer::due_after_epoch(std::int64_t epochs_done, std::int64_t global_step) const {
  return epochs_done >= epochs_ || (every_epochs_ > 0 && epochs_done % every_epochs_ == 0) ||
         due_after_step(global_step);
}

std::string Checkpointer::save(Backend& backend, const CheckpointProgress& progress,
                               const CheckpointMetrics& metrics, PhaseTimes& times) {
  backend.synchronize();  // the queued steps are theirs to pay, not the checkpoint's
  const double start = wall_seconds();
  std::string path;
  heartbeat(world_.rank() == 0 ? WatchPhase::kCheckpoint : WatchPhase::kCheckpointWait);
  agree_or_stop(world_, [&] {
    if (world_.rank() != 0) return;
    finish_write(progress.global_step);  // one write in flight at most: its snapshot is reused below
    CheckpointMeta meta;
    meta.config = saved_config_;
    meta.run_id = run_id_;
    meta.progress = progress;
    meta.progress.world_size_at_save = world_.size();
    meta.metrics = metrics;
    meta.optimizer_step = progress.global_step;  // one update per step
    // The whole critical-path cost of a checkpoint: one copy of each buffer into host memory. The bn
    // state is rank 0's (the same on every rank unless --bn-local).
    const FlatSizes sizes = backend.flat_sizes();
    if (!snapshot_ || snapshot_->size() != sizes.total()) {
      snapshot_.reset();
      snapshot_ = backend.allocate_host_floats(sizes.total());
    }
    float* const floats = snapshot_->data();
    backend.download_all(floats);
    CheckpointTensors tensors;
    tensors.params = {floats, static_cast<std::size_t>(sizes.params)};
    tensors.optimizer_state = {floats + sizes.params, static_cast<std::size_t>(sizes.optimizer_state)};
    tensors.bn_running = {floats + sizes.params + sizes.optimizer_state, static_cast<std::size_t>(sizes.state)};
    path = dir_.path_for(meta.progress);
    writer_.start(std::move(meta), tensors);
  });
  const double seconds = wall_seconds() - start;
  times.add(Phase::kCheckpoint, seconds);
  snapshot_seconds_ = seconds;
  snapshot_step_ = progress.global_step;
  return path;
}

void Checkpointer::wait(std::int64_t global_step, PhaseTimes& times) {
  const double start = wall_seconds();
  heartbeat(world_.rank() == 0 ? WatchPhase::kCheckpoint : WatchPhase::kCheckpointWait);
  agree_or_stop(world_, [&] {
    if (world_.rank() == 0) finish_write(global_step);
  });
  times.add(Phase::kCheckpoint, wall_seconds() - start);
}

bool Checkpointer::poll(std::int64_t global_step) {
  if (world_.rank() != 0 || !writer_.finished()) return false;
  if (writer_.failed()) return true;  // wait() reports it, on every rank
  finish_write(global_step);          // complete: no wait
  return false;
}

void Checkpointer::finish_write(std::int64_t global_step) {
  const std::optional<CheckpointWriter::Written> written = writer_.wait();
  if (!written || !verbose_) return;
  std::printf("checkpoint: %s (%.1f ms on the training path; written in %.1f ms in the background, while %lld "
              "step(s) trained)\n",
              written->path.c_str(), 1e3 * snapshot_seconds_, 1e3 * written->seconds,
              static_cast<long long>(global_step - snapshot_step_));
  std::fflush(stdout);
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
