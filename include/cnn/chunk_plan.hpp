// How the trainer hands its steps to the backend (--steps-per-launch; docs/TRAINING.md): one step at
// a time (the one-step loop), or chunks of whole steps in one Backend::train_chunk call, which the cuda
// backend runs inside one persistent kernel (step_chunk.hpp). Chunks need a run whose steps need
// nothing between them that only the host can do: one rank, or several whose backend exchanges the
// gradients inside the chunk (the persistent kernel through peer memory; never a step without its
// exchange), --on-nonfinite stop (skip drops a step and goes on), the data in memory (stream mode
// re-binds the backend within an epoch) and no --trace (it times each step's phases on the host).
// Otherwise every call runs one step. `auto` takes chunks only where they are also faster: a start-up
// measurement times both paths on the run's own backend (step_path_advisor.hpp).
//
// A chunk never crosses what the loop must do between two steps, so the loop does it at the same
// step as with one step per call: the epoch's end, a checkpoint due (--checkpoint-every-steps), and
// the test hook CNN_TEST_STOP_AFTER_STEPS. A signal stops a chunk at the next step boundary through
// the backend's stop word (signals.hpp), and the loop's agreement after the chunk sees it as always.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cnn/choices.hpp"
#include "cnn/lr_schedule.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/sampler.hpp"
#include "cnn/step_chunk.hpp"

namespace cnn {

// What --steps-per-launch auto measured at start-up (step_path_advisor.hpp): the seconds of one step
// inside the persistent kernel and through the one-step loop, each the slowest rank's; or why it
// measured nothing, in which case auto keeps the one-step loop.
struct StepPathMeasurement {
  double chunk_seconds = 0.0;  // per step, in one Backend::train_chunk of several steps
  double loop_seconds = 0.0;   // per step, one train_step each
  std::string skipped;         // non-empty: nothing was measured, and why
};

// What the run is and what the backend can do, for the plan.
struct ChunkConditions {
  std::int64_t steps_per_launch = 0;  // --steps-per-launch; 0: auto
  std::int64_t steps_per_epoch = 1;
  int ranks = 1;
  NonFinitePolicy on_nonfinite = NonFinitePolicy::kStop;
  bool stream = false;  // stream mode (not memory)
  bool trace = false;   // --trace
  // Backend::persistent_steps_unsupported for the run's batches (this rank's slices of the global one,
  // and of the epoch's short last one where there is one): "" when the backend runs them inside one kernel.
  std::string kernel_unsupported;
  // Several ranks: Backend::prepare_chunk_exchange, "" when the chunks exchange inside the kernel.
  std::string exchange_unsupported;
  // auto only: the measurement of both paths, once the conditions above allow chunks. With it, auto
  // takes chunks only where a step inside the persistent kernel measured faster.
  std::optional<StepPathMeasurement> measured;
  // auto, resumed: the path the checkpoint's run took (CheckpointConfig::step_path), taken again
  // without a measurement, so that the resumed run repeats the uninterrupted one bit for bit; "": none.
  std::string resumed_path;
};

struct ChunkPlan {
  // The most steps per train_chunk call: 1 is the one-step loop (train_step, as without chunks);
  // 0: no cap, up to the epoch's end.
  std::int64_t cap = 1;
  // The settings line's value: "up to 600 (persistent kernel: 0.130 ms a step, one launch per step
  // 0.134 ms, measured)", "up to 7 (persistent kernel)", "1 (2 ranks: ...)", ...
  std::string describe;
  // What the checkpoints record (CheckpointConfig::step_path): "persistent" where the chunks run in the
  // persistent kernel, else "one-step" (the default loop's chunks give the one-step loop's bits).
  std::string step_path = "one-step";

  bool chunked() const { return cap != 1; }
};

ChunkPlan plan_chunks(const ChunkConditions& conditions);

// Where the loop must be between two steps, for the chunk that begins at `step` of an epoch.
struct ChunkBounds {
  std::int64_t step = 0;             // the chunk's first step, in the epoch (0-based)
  std::int64_t steps_per_epoch = 1;
  std::int64_t cap = 0;              // ChunkPlan::cap (0: none)
  std::int64_t train_count = 0;      // the epoch's samples: a short last batch is a chunk of its own
  std::int64_t batch = 1;            // the global batch
  std::int64_t global_step = 0;      // steps of the run done before the chunk
  // Checkpointer::due_after_step: true when a checkpoint is due once `global_step` steps are done.
  std::function<bool(std::int64_t)> checkpoint_due;
  // Steps the run may still take before the test hook CNN_TEST_STOP_AFTER_STEPS fires after the last
  // of them (0: the hook is off or has fired); the same on every rank, whichever rank it fires on.
  std::int64_t steps_until_stop_hook = 0;
};

// The end (excluded) of that chunk: the earliest of the epoch's end, the cap, the step after which a
// checkpoint is due, the step after which the stop hook fires, and a short last batch. At least step + 1.
std::int64_t chunk_end(const ChunkBounds& bounds);

// The chunk of steps [step, end) of one rank: each step's lr and Adam step as the one-step loop sets
// them (global step g takes the schedule's lr at g and optimizer step g + 1), the mean's scale over
// the global batch, and the step randomness of the first. The rank's slice of step 0 is `mine`, of a
// global batch of `global_batch` samples. `nan_at`: the chunk's index of the test hook
// CNN_TEST_NAN_AT's step, or -1.
StepChunk make_step_chunk(const OptimizerSettings& optimizer, const LearningRate& learning_rate, std::uint64_t seed,
                          std::int64_t global_step, Range mine, std::int64_t global_batch, std::int64_t steps,
                          std::int64_t nan_at);

}  // namespace cnn
