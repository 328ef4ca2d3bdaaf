// Divergence: non-finite gradients stop every rank together (exit 4) with one line naming the global
// step, the rank(s) where they appeared and the layer; or, with --on-nonfinite skip, the step's update
// is dropped on every rank and counted.
//
// The fast path costs one scan of the REDUCED gradient per step and no extra collective: a NaN or an
// infinity on any rank survives the allreduce's sum (NaN + x = NaN, inf + x = inf or NaN), and every
// rank holds the same reduced bytes (the parameters staying identical relies on that already), so all
// ranks reach the same verdict on their own. Only on the rare failure path does each rank recompute its
// own gradient (the step is deterministic) to learn where the value came from, and rank 0 gathers who
// saw it. No checkpoint is written after a divergence: the stop comes before the update and before
// any save, so the newest checkpoint is the last good one.
//
// A non-finite LOSS with finite gradients (an infinite cross-entropy from a probability rounded to 0)
// is caught at the epoch's end, where the epoch's mean train loss is checked (also exit 4, one line).
#pragma once

#include <cstdint>
#include <string>

#include <optional>

#include "cnn/backend.hpp"
#include "cnn/choices.hpp"  // NonFinitePolicy, parse_nonfinite_policy
#include "cnn/communicator.hpp"
#include "cnn/model.hpp"
#include "cnn/sampler.hpp"
#include "cnn/test_hooks.hpp"

namespace cnn {

// The view ("fc.weight") holding flat index `index`, or "?" outside the layout.
std::string param_name_at(const ParamLayout& layout, std::int64_t index);

class DivergenceGuard {
 public:
  // world may be null (tests with a single rank and no MpiWorld). `nan_at`: the test hook
  // CNN_TEST_NAN_AT (test_hooks.hpp), which puts a NaN into one rank's gradient in one global step.
  DivergenceGuard(NonFinitePolicy policy, const ParamLayout& layout, const MpiWorld* world, int rank,
                  const std::optional<TestHooks::NanAt>& nan_at = std::nullopt);

  // The trainer calls this before each step with the steps done so far. With skip, the backend's
  // train stats so far are banked, so a dropped step's loss can be left out of the epoch's.
  void begin_step(Backend& backend, std::int64_t steps_done);

  // Called by train_step after the exchange, on both of its paths. In the NaN hook's step every rank
  // puts the NaN into its reduced gradient, as the allreduce of the hook rank's NaN would have: the
  // hook needs no path of its own, and the failure path's recompute still finds it on that rank only.
  void after_exchange(Backend& backend) const;

  // Collective in effect (every rank reaches the same verdict). After the allreduce: true when the
  // update may be applied. Stop: throws AlreadyReported(kDiverged) on every rank after rank 0's one
  // line. Skip: returns false on every rank (rank 0 prints one warning line per skipped step).
  // `mine` is this rank's slice, recomputed on the failure path.
  // With stop on a device backend the check of this step is only enqueued (the device itself skips
  // the update when it fails) and read by settle(): the next update_allowed calls it.
  bool update_allowed(Backend& backend, Range mine, bool reduced_over_ranks);
  // Reads the enqueued check of the last step, if any, and stops as update_allowed would have. The
  // trainer calls it wherever the parameters leave the device or the data moves: before a
  // checkpoint, before stream mode re-binds, and at the epoch's end. Collective like update_allowed
  // (every rank calls it at the same points).
  void settle(Backend& backend);

  // Chunks of steps (chunk_plan.hpp), which check each step inside Backend::train_chunk:
  // The index into a chunk of `steps` steps after `steps_done` steps of the run of the NaN hook's
  // step (every rank's, as after_exchange), or -1.
  std::int64_t nan_hook_index(std::int64_t steps_done, std::int64_t steps) const;
  // The chunk refused the step after `steps_done` steps of the run: its gradient (several ranks: the
  // sum over ranks, which every rank checked alike) held a non-finite value at `index`. Reports it as
  // update_allowed would (stop: the one line, then AlreadyReported(kDiverged)); `mine` is this rank's
  // slice of that step, recomputed to name the ranks whose own gradient held it.
  void on_chunk_nonfinite(Backend& backend, std::int64_t steps_done, std::int64_t index, Range mine);

  // The backend's train stats since the last call plus the banked ones (use instead of
  // Backend::take_train_stats in the trainer).
  BatchStats take_train_stats(Backend& backend);

  std::int64_t skipped_total() const { return skipped_total_; }
  // Skipped steps since the last call (the metrics row of an epoch).
  std::int64_t take_skipped();
  NonFinitePolicy policy() const { return policy_; }

 private:
  struct PendingCheck {
    bool active = false;
    std::int64_t step = 0;
    Range mine;
    bool reduced_over_ranks = false;
  };
  void inject_test_nan(Backend& backend, std::int64_t step) const;  // on the hook's rank only
  void poison_for_test(Backend& backend) const;
  bool on_nonfinite(Backend& backend, std::int64_t reduced_index, std::int64_t step, Range mine,
                    bool reduced_over_ranks);

  NonFinitePolicy policy_;
  const ParamLayout& layout_;
  const MpiWorld* world_;
  int rank_;
  std::int64_t step_ = 0;  // 1-based global step being run
  std::int64_t nan_hook_step_ = 0;   // the hook's step (0: no hook), the same on every rank (agreed env)
  bool nan_hook_injects_here_ = false;  // whether this rank is the hook's rank
  PendingCheck pending_;  // an enqueued device check not yet read
  BatchStats banked_;
  std::int64_t skipped_total_ = 0;
  std::int64_t skipped_since_take_ = 0;
};

// The epoch-end check of the mean train loss: one line on rank 0 and AlreadyReported(kDiverged) on
// every rank (all hold the same reduced value) when it is not finite.
void check_epoch_loss(const MpiWorld& world, std::int64_t epoch, double mean_train_loss);

}  // namespace cnn
