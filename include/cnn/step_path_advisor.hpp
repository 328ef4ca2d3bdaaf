// --steps-per-launch auto's start-up measurement (issue 25: "the advisor chooses it when it is
// faster, and says so"). Where the run could take chunks of steps inside the persistent kernel
// (chunk_plan.hpp), it times on the run's own backend, from the run's first step on, K ordinary steps
// (train_step, with the run's communicator and overlap reducer) against one Backend::train_chunk of the
// same K steps, and the plan takes chunks only where a step inside the kernel is faster. The persistent
// kernel is faster at most shapes but not at all (docs/PERFORMANCE.md: 5% slower at batch 100, d 256).
//
// How it times, as the scaling advisor does (exchange_calibration.hpp): one warm-up of each path
// first (the first launch builds the graphs and plans), then the median of kStepPathRepeats runs of each,
// alternated, the backend synchronised and the ranks met at a barrier before each and synchronised
// after; then the slowest rank's median per path (a step waits for it), so every rank decides the same.
// K is the steps that last about kStepPathTargetSeconds of ordinary steps (a launch's jitter is then small
// against it), at least 2 and at most the whole steps left in the epoch from the run's position.
//
// Nothing of it reaches the run: the parameters, the optimizer state and the backend's state
// (bn's running statistics) are put back after every timed body, and the train stats, phase times
// and the communicator's and reducer's timings it produced are discarded. It never runs the test hook
// CNN_TEST_NAN_AT, never touches the stop word (a signal during it stops the run at its first step
// boundary, as ever), and measures nothing where a chunk stops short (a stop or a non-finite step).
#pragma once

#include <cstdint>
#include <functional>

#include "cnn/backend.hpp"
#include "cnn/chunk_plan.hpp"
#include "cnn/communicator.hpp"
#include "cnn/gradient_overlap.hpp"
#include "cnn/lr_schedule.hpp"
#include "cnn/optimizer.hpp"

namespace cnn {

// The run the advisor measures on: its backend, bound to the epoch's order and holding the run's
// parameters, and where the run starts.
struct StepPathRun {
  const MpiWorld* world = nullptr;
  Backend* backend = nullptr;
  Communicator* comm = nullptr;
  OverlapReducer* overlap = nullptr;  // null: the plain step
  OptimizerSettings optimizer;        // the run's (each step's lr and step count are set as the loop sets them)
  const LearningRate* learning_rate = nullptr;
  std::uint64_t seed = 0;
  std::int64_t param_count = 0;       // ParamLayout::total()
  std::int64_t train_count = 0;       // the epoch's samples
  std::int64_t batch = 1;             // the global batch
  std::int64_t step_in_epoch = 0;     // the run's first step (the resume position), in the epoch's order
  std::int64_t global_step = 0;       // steps of the run done before it
};

// Seconds of a monotonic clock; the measurement reads it around each timed body (a seam for tests).
using StepPathClock = std::function<double()>;

inline constexpr double kStepPathTargetSeconds = 0.005;  // of ordinary steps in each timed body
inline constexpr int kStepPathRepeats = 3;                // timed runs of each path, after one warm-up

// Collective: every rank calls it at the same point, with the same settings. The backend must hold no
// train stats yet (they could not be put back). Returns the two paths' seconds a step, the slowest
// rank's, or, with `skipped` set, why nothing was measured.
StepPathMeasurement measure_step_paths(const StepPathRun& run, const StepPathClock& clock = wall_seconds);

}  // namespace cnn
