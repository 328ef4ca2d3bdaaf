// The run's rows (run_log.hpp): metrics.csv and timing.csv after each epoch, and allreduce.csv for
// runs of 2+ ranks, written by rank 0 before the epoch's checkpoint (a resume from an older checkpoint
// drops later rows, while a row missing after its checkpoint could never be recovered).
#pragma once

#include <cstdint>

#include "cnn/gradient_overlap.hpp"
#include "cnn/run_log.hpp"
#include "cnn/timing_observer.hpp"
#include "cnn/training_observer.hpp"

namespace cnn {

class RunLogObserver final : public TrainingObserver {
 public:
  // `timing` comes before this observer in the list. `overlap`: the overlapped step's reducer, or null.
  RunLogObserver(const RunLog& log, const TimingObserver& timing, int rank, int ranks, std::int64_t gradient_bytes,
                 const OverlapReducer* overlap)
      : log_(log), timing_(timing), rank_(rank), ranks_(ranks), gradient_bytes_(gradient_bytes), overlap_(overlap) {}

  void on_epoch_end(EpochMetrics& metrics) override;

 private:
  const RunLog& log_;
  const TimingObserver& timing_;
  int rank_;
  int ranks_;
  std::int64_t gradient_bytes_;
  const OverlapReducer* overlap_;
};

}  // namespace cnn
