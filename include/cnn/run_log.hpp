// The run directory's logs, written by rank 0 only:
//   metrics.csv  epoch,train_loss,test_loss,test_accuracy,images_per_s,epoch_seconds,wall_seconds,skipped_steps
//   timing.csv   epoch,phase,min_s,mean_s,max_s,max_rank   (per phase, over ranks, seconds per epoch;
//                plus a "step" row: the wall time of the epoch's training steps, to check phases against)
//   allreduce.csv epoch,ranks,bytes_per_step,steps,mean_s,algbw_GBps,busbw_GBps,overlap,buckets,exposed_s,
//                overlap_fraction   (runs of 2+ ranks)
//   scaling.log  one line per start of 2+ ranks: the scaling advisor's measurements and choices
//   runs.log     one line per start: "UTC time, slurm_job=<id|->, restart=<n>, ranks=<N>, resumed_from=<path|fresh>"
// Formats are documented in docs/LOGS.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cnn/phase_times.hpp"
#include "cnn/timing_stats.hpp"

namespace cnn {

struct EpochMetrics {
  std::int64_t epoch = 0;  // 1-based
  double train_loss = 0.0;
  double test_loss = 0.0;
  double test_accuracy = 0.0;
  double images_per_second = 0.0;
  double epoch_seconds = 0.0;  // training steps of this epoch
  double wall_seconds = 0.0;   // since the start of the run
  std::int64_t skipped_steps = 0;  // steps whose update was dropped (--on-nonfinite skip)
};

// One phase of one epoch reduced over ranks.
struct PhaseSpread {
  Phase phase = Phase::kData;
  double min = 0.0, mean = 0.0, max = 0.0;
  int max_rank = 0;
};

class RunLog {
 public:
  explicit RunLog(std::string run_dir) : run_dir_(std::move(run_dir)) {}

  // Creates the run directory (and parents) and proves it writable. Refuses a directory that already
  // holds a run's metrics.csv (RunDirectory::claim, which runs first, refuses any earlier run).
  // Throws IoError (cannot create or write) or UsageError (holds a run).
  void prepare() const;

  // For a resumed run (or --resume auto): the directory may hold a run already. Rows of epochs after
  // `completed_epochs` (written after the checkpoint being resumed) are dropped, by an atomic rewrite
  // of metrics.csv and timing.csv, so the appended rows never repeat an epoch. Throws IoError.
  void prepare_resume(std::int64_t completed_epochs) const;

  // Appends one line (plus newline) to runs.log and flushes it.
  void append_start(const std::string& line) const;

  void append_epoch(const EpochMetrics& metrics, const std::vector<PhaseSpread>& phases) const;
  // As above, plus the "step" row after the phases: the epoch's step wall time over ranks.
  void append_epoch(const EpochMetrics& metrics, const std::vector<PhaseSpread>& phases, const RankSpread& step) const;
  // One row of allreduce.csv (the trainer writes it only for runs of 2+ ranks).
  void append_allreduce(const AllreduceStats& stats) const;

  std::string metrics_path() const { return run_dir_ + "/metrics.csv"; }
  std::string timing_path() const { return run_dir_ + "/timing.csv"; }
  std::string allreduce_path() const { return run_dir_ + "/allreduce.csv"; }
  std::string runs_path() const { return run_dir_ + "/runs.log"; }
  const std::string& dir() const { return run_dir_; }

 private:
  std::string run_dir_;
};

}  // namespace cnn
