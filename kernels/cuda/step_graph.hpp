// A training step captured as a CUDA graph once per batch size and replayed with only its index copy
// changed: the step's first work is a copy of its slice of the epoch's permutation into the batch's
// index buffer (enqueue_index_copy), and each replay points that copy at the next slice.
// StepGraphCache holds the policy around it for the device backend's plain and overlapped
// (communication inside) steps.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "cnn/flight_recorder.hpp"

#include "cuda/step_timer.hpp"

namespace cnn::cuda {

struct StepGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaGraphNode_t index_copy = nullptr;  // the copy into the batch's index buffer (a kernel node)
  cudaKernelNodeParams index_copy_params{};  // as captured; each replay changes its source
  // The collectives the capture queued (the overlapped step's allreduces): the flight recorder
  // records them at each replay, as the eager step records them when it queues them.
  std::vector<FlightCaptureTally::Call> collectives;
};

// Queues the copy of `count` indices into the batch's index buffer on `stream`. A kernel, not a
// memcpy: the step's first kernel after it can then launch as its dependent (dependent_launch.cuh),
// where a copy would be an ordinary full dependency in front of every step.
void enqueue_index_copy(std::int32_t* batch_indices, const std::int32_t* indices, std::int64_t count,
                        cudaStream_t stream);

// Captures what `enqueue` queues on `stream` into `step` and instantiates it. The index copy is
// found among the graph's roots by its kernel and its destination, `batch_indices` (NCCL's captured
// work may add roots of its own). On failure, ends the capture, frees what was made, and rethrows; a graph
// without that copy is an internal error whose message ends with `hint`.
void capture_step_graph(StepGraph& step, cudaStream_t stream, const std::function<void()>& enqueue,
                        const std::int32_t* batch_indices, const char* hint);

// Replays `step` on `stream` with its index copy reading `count` indices from `indices`.
void launch_step_graph(const StepGraph& step, std::int32_t* batch_indices, const std::int32_t* indices,
                       std::int64_t count, cudaStream_t stream);

void destroy_step_graph(StepGraph& step) noexcept;

// The eager -> capture -> replay policy of one kind of training step, one graph per batch size:
// - the first step of a batch size runs eagerly, phase by phase, so that it measures the split that
//   the replays of that size are charged with (step_timer.hpp); then it is captured;
// - later steps replay the graph with only the index copy's source changed;
// - `eager` asks for an eager step although a graph exists (the overlapped step's first of each
//   epoch, which the communicator's events time);
// - disabled (BackendOptions::cuda_graphs off, CNN_CUDA_GRAPHS=0, or set_enabled(false)): every step
//   runs eagerly.
// A graph holds raw pointers: its owner clears the cache whenever a buffer the step uses moves (batch
// buffers, the data set, the epoch's order), and set_generation clears it when the work to capture
// changes (the overlap listener's generation).
class StepGraphCache {
 public:
  // Queues one step whose index copy reads `indices`; `timed`: close a StepTimer phase after each
  // stage (false while capturing: a replay is timed as one interval).
  using Enqueue = std::function<void(const std::int32_t* indices, bool timed)>;

  // hint: the end of the message for a captured step without its index copy (an internal error).
  StepGraphCache(bool enabled, const char* hint) : enabled_(enabled), hint_(hint) {}
  ~StepGraphCache() { clear(); }
  StepGraphCache(const StepGraphCache&) = delete;
  StepGraphCache& operator=(const StepGraphCache&) = delete;

  // Off: every step runs eagerly from now on, and the graphs are dropped (the device backend, when
  // bn's statistics go through the host in the middle of the step); on: steps are captured again.
  void set_enabled(bool enabled) noexcept {
    if (!enabled) clear();
    enabled_ = enabled;
  }
  // Drops every graph when `generation` is not the one they were captured for.
  void set_generation(std::uint64_t generation) noexcept;
  // One step of n samples on `stream`, timed by `timer`; batch_indices: the index copy's destination.
  void run(std::int64_t n, std::int32_t* batch_indices, const std::int32_t* indices, bool eager, cudaStream_t stream,
           StepTimer& timer, const Enqueue& enqueue);
  void clear() noexcept;

 private:
  bool enabled_;
  const char* hint_;
  std::uint64_t generation_ = 0;
  std::map<std::int64_t, StepGraph> graphs_;  // by batch size
};

}  // namespace cnn::cuda
