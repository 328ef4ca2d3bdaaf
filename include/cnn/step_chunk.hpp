// Several training steps of one rank in one call: the persistent seed kernel (issue 25) runs each
// step's forward, loss, backward, gradient exchange (2+ ranks), divergence check and update inside
// one launch, with grid-wide barriers between the phases, so that a step costs no kernel launches.
// The trainer hands the backend a chunk of whole steps of one epoch (they never cross an epoch's end,
// a checkpoint or a stop the trainer plans), and gets back how far it came.
//
// What a chunk promises is what the trainer's one-step loop promises: every step's update uses the
// schedule's lr for its global step; a signal stops at the next step boundary (the kernel polls a host
// word, chunk_stop_word(), once per step); a non-finite gradient stops before its update is applied;
// and a step's bits do not depend on where a chunk begins or ends, so a run resumed from a checkpoint
// taken between chunks repeats the uninterrupted run bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "cnn/optimizer.hpp"

namespace cnn {

struct StepChunk {
  std::int64_t first = 0;   // position in this epoch's order (begin_epoch) of this rank's first sample of step 0
  std::int64_t batch = 0;   // this rank's samples per step (its slice of the global batch)
  std::int64_t stride = 0;  // the global batch: step k takes [first + k*stride, first + k*stride + batch)
  // One per step, in order: the settings the trainer's loop would pass to apply_update (the
  // schedule's lr for that global step, and Adam's 1-based step count). steps = optimizer.size() >= 1.
  std::vector<OptimizerSettings> optimizer;
  float grad_scale = 1.0f;  // 1 / stride: the gradient is the SUM over the global batch, the update takes the mean
  // Step 0's randomness (Backend::set_step_randomness): the run's seed and its global step (0-based,
  // steps done before it); step k is global step global_step + k, this rank's slice beginning at
  // first + k*stride.
  std::uint64_t seed = 0;
  std::int64_t global_step = 0;
  // Test hook CNN_TEST_NAN_AT (divergence.hpp): the step, as an index into this chunk, whose gradient
  // gets a NaN in its last element before the check; -1: none.
  std::int64_t nan_at = -1;
  // Called on the calling thread with the count of steps finished so far, as they finish (the
  // persistent kernel: as the calling thread sees its host word move while it waits), for the stall
  // watchdog's heartbeat: a chunk beats once per step, as the one-step loop does. May be empty.
  std::function<void(std::int64_t steps_done)> on_progress;

  std::int64_t steps() const { return static_cast<std::int64_t>(optimizer.size()); }
};

// Device-clock seconds of one step's phases, as the persistent kernel's block 0 read its clock at
// each grid-wide barrier (docs/LOGS.md says what each covers).
struct ChunkStepTimes {
  double forward = 0.0;   // the conv, pool and fc layers' forward and the loss
  double backward = 0.0;  // every gradient, summed over the batch, and the divergence check
  double update = 0.0;    // the optimizer's update
  double total() const { return forward + backward + update; }
};

struct StepChunkResult {
  std::int64_t steps_done = 0;  // steps whose update was applied, from step 0 on
  // When >= 0: step steps_done's gradient held a non-finite value at this index of the flat buffer
  // (the first one), and neither it nor any later step was applied.
  std::int64_t nonfinite_index = -1;
  bool stop_seen = false;  // the stop word was set: the chunk ended after step steps_done - 1
  std::vector<ChunkStepTimes> times;  // one per step run (steps_done, and the refused step if any)
};

}  // namespace cnn
