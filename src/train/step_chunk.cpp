// Backend::train_chunk's default: the chunk's steps one by one, through the same calls the trainer's
// one-step loop makes for a single rank (a run of several ranks takes chunks only where the backend
// exchanges inside them: chunk_plan.hpp) (compute_gradients, the divergence check, apply_update), so a
// backend that cannot run steps inside one kernel gives the very bits of that loop.
#include <limits>
#include <stdexcept>

#include "cnn/backend.hpp"

namespace cnn {

StepChunkResult Backend::train_chunk(const StepChunk& chunk) {
  // Its steps have no exchange: one rank's chunks only (a slice of a larger global batch is another rank's).
  if (chunk.stride != chunk.batch)
    throw std::logic_error("Backend::train_chunk's default runs the steps of a single rank only");
  StepChunkResult result;
  volatile int* stop = chunk_stop_word();
  for (std::int64_t k = 0; k < chunk.steps(); ++k) {
    // The boundary before step k: a stop seen here ends the chunk with k steps done (never before the
    // first step: the trainer has just agreed at that boundary).
    if (k > 0 && stop != nullptr && *stop != 0) {
      result.stop_seen = true;
      break;
    }
    const std::int64_t begin = chunk.first + k * chunk.stride;
    set_step_randomness({chunk.seed, chunk.global_step + k, begin});
    // The step's own phases below; the trainer took what came before the chunk (trainer.cpp).
    (void)take_phase_times();
    compute_gradients(begin, chunk.batch);
    if (k == chunk.nan_at) set_grad_for_test(flat_sizes().params - 1, std::numeric_limits<float>::quiet_NaN());
    const std::int64_t nonfinite = first_nonfinite_grad();
    ChunkStepTimes times;
    if (nonfinite < 0) apply_update(chunk.optimizer[static_cast<std::size_t>(k)], chunk.grad_scale);
    const PhaseTimes phases = take_phase_times();
    times.forward = phases.get(Phase::kData) + phases.get(Phase::kH2D) + phases.get(Phase::kForward);
    times.backward = phases.get(Phase::kBackward);
    times.update = phases.get(Phase::kUpdate);
    result.times.push_back(times);
    if (nonfinite >= 0) {
      result.nonfinite_index = nonfinite;
      break;
    }
    ++result.steps_done;
    if (chunk.on_progress) chunk.on_progress(result.steps_done);
  }
  return result;
}

}  // namespace cnn
