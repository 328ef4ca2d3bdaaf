// Stopping on a signal with a checkpoint. SIGTERM (SLURM's warning before the kill, mpirun's
// forward of its own SIGTERM/SIGINT), SIGINT (Ctrl-C) and SIGUSR1 (forwarded by mpirun without a
// SIGKILL behind it) only set a flag. At each step boundary the ranks reduce the flag with MPI_MAX,
// so a signal that reached ANY rank stops them all at the same step; then they write a checkpoint
// and exit with ExitCode::kStoppedBySignal. A second signal, 2 s or more after the first, means
// "now": the default action is restored and the process _exits with 128 + signo (the last checkpoint
// stays whole: it is only ever replaced by an atomic rename). A repeat within 2 s is the same request
// delivered twice (SLURM signals every process and mpirun forwards its own copy) and is ignored.
#pragma once

#include <cstdint>

#include "cnn/communicator.hpp"
#include "cnn/test_hooks.hpp"
#include "cnn/training_observer.hpp"

namespace cnn {

// Installs the handlers for SIGTERM, SIGINT and SIGUSR1. Call once, after MPI_Init (Open MPI may
// install its own handlers during init; ours must win).
void install_stop_handlers();

// The first stop signal received by this process, or 0.
int local_stop_signal();

// Points the handler at `word` as well (null: no longer): it stores the signal number there, a plain
// store. The trainer gives it the backend's chunk stop word (Backend::chunk_stop_word) while it runs
// chunks of steps, so a signal stops a chunk at the next step boundary (chunk_plan.hpp). A signal
// received before the call is stored at once.
void mirror_stop_signal(volatile int* word);

// "SIGTERM", "SIGINT", "SIGUSR1", or "signal N".
const char* signal_name(int signo);

// The stop signal any rank has seen (the largest signal number among them), or 0. Collective: every
// rank calls it at the same step boundary. One MPI_Allreduce of one int (cost: docs/CHECKPOINT.md).
int agree_on_stop(const MpiWorld& world);

// What the training loop's ranks agree on at a step boundary, in agree_on_stop's one reduction (no
// second collective): the stop signal as above, and whether rank 0's background checkpoint write has
// failed (`checkpoint_failed`: Checkpointer::poll on this rank), which then stops every rank with
// that write's error (Checkpointer::wait). `signo` is meaningful only when no write failed.
struct StepBoundary {
  int signo = 0;
  bool checkpoint_failed = false;
};
StepBoundary agree_at_step_boundary(const MpiWorld& world, bool checkpoint_failed);

// Test hooks at a step's end (test_hooks.hpp): CNN_TEST_STOP_AFTER_STEPS=N raises SIGUSR1 in this
// process once it has run N steps (on rank CNN_TEST_STOP_RANK, default 0), so tests can stop a run at
// a chosen step without racing a real signal; CNN_TEST_STEP_DELAY_MS sleeps. Unset: never fires.
// Observes the loop after the step is timed (training_observer.hpp), so the delay is no step's time.
class StopAfterStepsHook final : public TrainingObserver {
 public:
  StopAfterStepsHook(const TestHooks& hooks, int rank);
  // Call after each step with the steps this process has run.
  void after_step(std::int64_t steps_run) const;
  void on_step_end(const StepEvent& e) override { after_step(e.steps_run); }

 private:
  std::int64_t stop_after_ = 0;     // 0: off
  std::int64_t step_delay_ms_ = 0;  // CNN_TEST_STEP_DELAY_MS: slows every step (timing only), so a
                                    // test's signal surely arrives mid-run however fast the machine
};

}  // namespace cnn
