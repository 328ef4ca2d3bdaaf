// The trainer's side of checkpoints: when one is due, and taking it collectively. Checkpoints are
// asynchronous (docs/CHECKPOINT.md, "Asynchronous checkpoints"): rank 0 copies the flat buffers
// (parameters, optimizer state, bn state) into a host snapshot, one device-to-host copy on a GPU, and
// a background thread writes them (CheckpointWriter: tmp, fsync, rename, fsync of the directory,
// `latest`, pruning to --keep) while training goes on. One write is in flight at most: a checkpoint
// first waits for the one before. A write's failure stops every rank with its one line and exit code
// at the next step boundary (poll, agree_at_step_boundary), at the next checkpoint, or at wait().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cnn/backend.hpp"
#include "cnn/checkpoint.hpp"
#include "cnn/checkpoint_writer.hpp"
#include "cnn/communicator.hpp"
#include "cnn/phase_times.hpp"

namespace cnn {

// The checkpoint schedule and where checkpoints go (TrainConfig's Checkpoints group).
struct CheckpointerOptions {
  std::string run_dir;                 // --out: checkpoints go to RUN_DIR/checkpoints
  int every_epochs = 1;                // --checkpoint-every (0: only the final one)
  std::int64_t every_steps = 0;        // --checkpoint-every-steps (0: off)
  int epochs = 1;                      // --epochs: the final checkpoint comes after the last one
  int keep = 3;                        // --keep
  bool verbose = true;                 // not --quiet: a line per checkpoint
};

class Checkpointer {
 public:
  // `run_id`: the run directory's id (RunDirectory::claim), stored in every checkpoint; rank 0's matters.
  Checkpointer(const MpiWorld& world, const CheckpointerOptions& options, CheckpointConfig saved_config,
               const ParamLayout& layout, std::string run_id);

  // The step path the run takes (ChunkPlan::step_path), recorded in every checkpoint from now on.
  void record_step_path(const std::string& step_path) { saved_config_.step_path = step_path; }

  // After a step inside an epoch (not its last): --checkpoint-every-steps.
  bool due_after_step(std::int64_t global_step) const;
  // After an epoch: --checkpoint-every, the step schedule, and always after the last epoch, so that
  // every completed run ends with a checkpoint (runs are compared by their final files).
  bool due_after_epoch(std::int64_t epochs_done, std::int64_t global_step) const;

  // Collective. Waits for the write in flight (rank 0; its failure throws AlreadyReported on every
  // rank, its line printed), snapshots the backend's buffers with `progress` and `metrics`, and starts
  // writing them in the background. Returns the path being written (on rank 0; "" elsewhere). Adds
  // the time the training path spent here, snapshot and wait, to Phase::kCheckpoint.
  std::string save(Backend& backend, const CheckpointProgress& progress, const CheckpointMetrics& metrics,
                   PhaseTimes& times);

  // Collective. Returns once the write in flight, if any, is complete on disk; throws AlreadyReported
  // on every rank if it failed (rank 0 prints its line). Before a stop and at the end of a run.
  // `global_step`: where training is, for the checkpoint's line.
  void wait(std::int64_t global_step, PhaseTimes& times);

  // Not collective, no wait: on rank 0, prints the line of a write that has completed since, and
  // returns true when the write in flight has failed (then every rank must call wait(), which
  // reports it: agree_at_step_boundary tells them). False elsewhere.
  bool poll(std::int64_t global_step);

 private:
  // Rank 0: waits for the write in flight (rethrows its failure) and prints its line.
  void finish_write(std::int64_t global_step);

  const MpiWorld& world_;
  CheckpointDir dir_;
  CheckpointConfig saved_config_;
  std::string run_id_;
  const ParamLayout& layout_;
  int every_epochs_;
  std::int64_t every_steps_;
  int epochs_;
  int keep_;
  bool verbose_;
  // Rank 0: the snapshot being written, in the backend's fastest host memory (pinned for cuda), kept
  // from one checkpoint to the next; what its write cost the training path, and the step it holds.
  std::unique_ptr<HostFloats> snapshot_;
  double snapshot_seconds_ = 0.0;
  std::int64_t snapshot_step_ = 0;
  // Last: destroyed first, so a write still in flight (a run ending with an error) finishes reading
  // the snapshot before it is freed.
  CheckpointWriter writer_;
};

// Prints "stopped by SIGTERM at epoch E step S; checkpoint PATH" on rank 0 and throws
// AlreadyReported(kStoppedBySignal) on every rank. `epoch` is 1-based, `step` the steps done in it.
// Call Checkpointer::wait() first: the line promises a complete checkpoint.
[[noreturn]] void stop_for_signal(const MpiWorld& world, int signo, std::int64_t epoch, std::int64_t step,
                                  const std::string& path);

}  // namespace cnn
