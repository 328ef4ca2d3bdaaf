// One data-parallel training step, shared by the trainer and the tests:
//   this rank's slice of the global batch -> SUM of its per-sample gradients (backend)
//   -> allreduce SUM over ranks (communicator) -> update with grad_scale = 1 / global batch size.
// Every rank applies the same update to the same parameters, so they stay identical.
#pragma once

#include "cnn/backend.hpp"
#include "cnn/communicator.hpp"
#include "cnn/phase_times.hpp"
#include "cnn/sampler.hpp"

namespace cnn {

class DivergenceGuard;

// `global_batch` is a range of positions in the epoch permutation already given to begin_epoch().
// param_count is the length of the flat buffer (ParamLayout::total()).
// With a guard, non-finite gradients stop the run or (--on-nonfinite skip) drop the update: then it
// returns false. The phases are marked for the stall watchdog (watchdog.hpp).
bool train_step(Backend& backend, Communicator& comm, const OptimizerSettings& optimizer, std::int64_t param_count,
                Range global_batch, PhaseTimes& times, DivergenceGuard* guard = nullptr);

// Loss and accuracy over the first `count` test samples, split over ranks and summed on all of them.
BatchStats evaluate_test_set(Backend& backend, const MpiWorld& world, std::int64_t count);

}  // namespace cnn
