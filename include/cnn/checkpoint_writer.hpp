// One checkpoint write at a time, on a background thread: the asynchronous checkpoint
// (docs/CHECKPOINT.md, "Asynchronous checkpoints"). The trainer's thread hands over a snapshot and
// goes on training while this thread builds the HDF5 file, writes it to NAME.h5.tmp, fsyncs, renames,
// updates `latest` and prunes to --keep: CheckpointDir::save, the same code and the same crash-safety
// as a synchronous save. Its error (a full disk) is kept and rethrown by wait() on the trainer's
// thread, so it surfaces as the same one line and exit code as before, never lost.
//
// The thread makes no MPI call and touches no training state: it reads only the snapshot, which the
// caller keeps unchanged until wait() returns. libhdf5 it enters under the process-wide lock
// (src/io/hdf5_util.hpp).
#pragma once

#include <atomic>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "cnn/checkpoint.hpp"

namespace cnn {

class CheckpointWriter {
 public:
  CheckpointWriter(CheckpointDir dir, const ParamLayout& layout, int keep);
  // Waits for a write in flight. Its failure, which nobody can take any more (the run is ending with
  // another error), becomes one warning line on stderr.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  struct Written {
    std::string path;
    double seconds = 0.0;  // the write on its thread, from start() to the end of the pruning
  };

  // Starts CheckpointDir::save(meta, tensors, layout, keep) on a new thread. The memory `tensors`
  // points to must stay unchanged until wait() returns. One write at a time: call wait() first
  // (std::logic_error otherwise).
  void start(CheckpointMeta meta, const CheckpointTensors& tensors);

  // Started and not yet waited for.
  bool in_flight() const { return thread_.joinable(); }
  // The write in flight has ended, well or not, so wait() will not block. No wait.
  bool finished() const { return state_.load(std::memory_order_acquire) != State::kRunning && in_flight(); }
  // The write in flight has ended with an error (wait() rethrows it). No wait.
  bool failed() const { return state_.load(std::memory_order_acquire) == State::kFailed; }

  // Waits for the write in flight and returns what it wrote; nullopt when none is in flight. Rethrows
  // the write's error (IoError naming the file, ...); the write is over either way.
  std::optional<Written> wait();

 private:
  enum class State { kIdle, kRunning, kSucceeded, kFailed };

  void run(double start);

  const CheckpointDir dir_;
  const ParamLayout& layout_;
  const int keep_;
  // Owned by the thread while it runs; read by wait() after the join.
  CheckpointMeta meta_;
  CheckpointTensors tensors_;
  Written written_;
  std::exception_ptr error_;
  std::atomic<State> state_{State::kIdle};
  std::thread thread_;
};

}  // namespace cnn
