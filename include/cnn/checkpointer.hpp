// The trainer's side of checkpoints: when one is due, and writing it collectively. Rank 0 writes
// (CheckpointDir::save: tmp, fsync, rename, fsync of the directory, `latest`, pruning to --keep);
// every rank waits for its verdict, so no rank trains on past a failed save.
#pragma once

#include <cstdint>
#include <string>

#include "cnn/backend.hpp"
#include "cnn/checkpoint.hpp"
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

  // After a step inside an epoch (not its last): --checkpoint-every-steps.
  bool due_after_step(std::int64_t global_step) const;
  // After an epoch: --checkpoint-every, the step schedule, and always after the last epoch, so that
  // every completed run ends with a checkpoint (runs are compared by their final files).
  bool due_after_epoch(std::int64_t epochs_done, std::int64_t global_step) const;

  // Collective. Writes `progress` with the backend's parameters and optimizer state; returns the path
  // (on rank 0; "" elsewhere). Throws AlreadyReported on every rank if rank 0 could not write.
  std::string save(Backend& backend, const CheckpointProgress& progress, const CheckpointMetrics& metrics,
                   PhaseTimes& times) const;

 private:
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
};

// Prints "stopped by SIGTERM at epoch E step S; checkpoint PATH" on rank 0 and throws
// AlreadyReported(kStoppedBySignal) on every rank. `epoch` is 1-based, `step` the steps done in it.
[[noreturn]] void stop_for_signal(const MpiWorld& world, int signo, std::int64_t epoch, std::int64_t step,
                                  const std::string& path);

}  // namespace cnn
