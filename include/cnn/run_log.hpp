// The run directory's logs, written by rank 0 only:
//   metrics.csv  epoch,train_loss,test_loss,test_accuracy,images_per_s,epoch_seconds,wall_seconds
//   timing.csv   epoch,phase,min_s,mean_s,max_s,max_rank   (per phase, over ranks, seconds per epoch)
// Formats are documented in docs/LOGS.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cnn/phase_times.hpp"

namespace cnn {

struct EpochMetrics {
  std::int64_t epoch = 0;  // 1-based
  double train_loss = 0.0;
  double test_loss = 0.0;
  double test_accuracy = 0.0;
  double images_per_second = 0.0;
  double epoch_seconds = 0.0;  // training steps of this epoch
  double wall_seconds = 0.0;   // since the start of the run
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

  // Creates the run directory (and parents) and proves it writable. Refuses a directory that
  // already holds a run's metrics.csv, so that no earlier run's logs are overwritten.
  // Throws IoError (cannot create or write) or UsageError (holds a run).
  void prepare() const;

  void append_epoch(const EpochMetrics& metrics, const std::vector<PhaseSpread>& phases) const;

  std::string metrics_path() const { return run_dir_ + "/metrics.csv"; }
  std::string timing_path() const { return run_dir_ + "/timing.csv"; }
  const std::string& dir() const { return run_dir_; }

 private:
  std::string run_dir_;
};

}  // namespace cnn
