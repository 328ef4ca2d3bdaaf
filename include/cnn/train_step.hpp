// One data-parallel training step, shared by the trainer and the tests:
//   this rank's slice of the global batch -> SUM of its per-sample gradients (backend)
//   -> allreduce SUM over ranks (communicator) -> update with grad_scale = 1 / global batch size.
// Every rank applies the same update to the same parameters, so they stay identical.
#pragma once

#include "cnn/backend.hpp"
#include "cnn/communicator.hpp"
#include "cnn/gradient_overlap.hpp"
#include "cnn/phase_times.hpp"
#include "cnn/sampler.hpp"
#include "cnn/training_data.hpp"

namespace cnn {

class DivergenceGuard;

// `global_batch` is a range of positions in the epoch permutation already given to begin_epoch().
// param_count is the length of the flat buffer (ParamLayout::total()).
// One step; with `overlap` (not null, 2+ ranks) the allreduce runs under the backward through its
// communicator's non-blocking collectives, and the parameters end bitwise equal to the plain step's for
// 2 ranks (an elementwise sum of two values is the same in any order). With a guard, non-finite
// gradients stop the run or (--on-nonfinite skip) drop the update: then it returns false. The phases
// are marked for the stall watchdog (watchdog.hpp).
bool train_step(Backend& backend, Communicator& comm, const OptimizerSettings& optimizer, std::int64_t param_count,
                Range global_batch, PhaseTimes& times, OverlapReducer* overlap = nullptr,
                DivergenceGuard* guard = nullptr);

// Gives the backend what the data says it must hold (training_data.hpp): the data first, then the order.
void apply_binding(Backend& backend, const DataBinding& binding);

// Loss and accuracy over the first `count` test samples, split over ranks and summed on all of them.
// The backend holds the test samples from `held_from` on (a rank in stream mode holds only its slice).
BatchStats evaluate_test_set(Backend& backend, const MpiWorld& world, std::int64_t count, std::int64_t held_from = 0);

}  // namespace cnn
