// Phase times of the cuda backend, measured with CUDA events on its stream without a synchronisation
// per step. Work is bracketed by open() and close(phase): the time between the two marks is charged
// to the phase, and whatever ran on the stream in between brackets (the allreduce, which the trainer
// times itself) is not. take() waits once for the last mark and adds every interval.
//
// A captured step (one CUDA graph) is one interval on the stream. It is split into data, forward and
// backward by events the graph itself records (split_events), read from the graph's latest replay:
// the split of the last step is applied to the total of all graph steps since the last take(), an
// estimate that is exact while the batch size does not change.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cnn/phase_times.hpp"

namespace cnn::cuda {

// Events a graph records after its data phase and after its forward phase.
struct SplitEvents {
  cudaEvent_t data_end = nullptr;
  cudaEvent_t forward_end = nullptr;
};

class StepTimer {
 public:
  explicit StepTimer(cudaStream_t stream) : stream_(stream) {}
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  void open();
  void close(Phase phase);
  // Closes an interval that was one replay of a graph recording `split`.
  void close_graph_step(const SplitEvents& split);
  // Sums since the last call (waits for the stream to reach the last mark).
  PhaseTimes take();

 private:
  struct Mark {
    cudaEvent_t event = nullptr;
    int phase = kOpens;           // a Phase, or kOpens / kGraphStep
    SplitEvents split;            // for kGraphStep
  };
  static constexpr int kOpens = -1;
  static constexpr int kGraphStep = -2;
  // Bounds the events held when take() is not called for a long time.
  static constexpr std::size_t kMaxMarks = 1 << 14;

  cudaEvent_t record();
  void harvest();

  cudaStream_t stream_;
  std::vector<cudaEvent_t> spare_;
  std::vector<Mark> marks_;
  PhaseTimes harvested_;
};

}  // namespace cnn::cuda
