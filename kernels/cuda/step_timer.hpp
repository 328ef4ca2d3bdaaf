// Phase times of the cuda backend, measured with CUDA events on its stream without a synchronisation
// per step. Work is bracketed by open() and close(phase): the time between the two marks is charged
// to the phase, and whatever ran on the stream in between brackets (the allreduce, which the trainer
// times itself) is not. take() waits once for the last mark and adds every interval.
//
// A captured step (one CUDA graph) is one interval on the stream, timed by events recorded on the
// stream around its launch. It is split into data, forward and backward in the proportions measured
// on the eager steps (the backend runs the first step of every batch size eagerly, phase by phase,
// before capturing it). Events recorded inside a graph are not used: timing them against stream
// events failed on the device (cudaEventElapsedTime: invalid device context).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cnn/phase_times.hpp"

namespace cnn::cuda {


class StepTimer {
 public:
  explicit StepTimer(cudaStream_t stream) : stream_(stream) {}
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  void open();
  void close(Phase phase);
  // Closes an interval that was one replay of a captured step.
  void close_graph_step();
  // Sums since the last call (waits for the stream to reach the last mark).
  PhaseTimes take();

 private:
  struct Mark {
    cudaEvent_t event = nullptr;
    int phase = kOpens;           // a Phase, or kOpens / kGraphStep
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
  PhaseTimes eager_steps_;  // all eager data/forward/backward time so far: the split for graph steps
};

}  // namespace cnn::cuda
