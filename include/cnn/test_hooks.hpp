// Test hooks: environment variables that only the tests set (tests/*.sh), to put a fault or a delay
// at a chosen point of a run. main reads them once (read_test_hooks_from_environment) and passes the
// struct to the parts that act on it; unset, every hook is off and the run is the production run.
// A malformed value means off: a hook is never user input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cnn {

struct TestHooks {
  // CNN_TEST_WRITE_PAUSE_MS=N: sleep N ms at each stage of a durable write, so that a test's SIGKILL
  // at a random time lands inside the write window (tests/safe_write_test.sh).
  long write_pause_ms = 0;
  // CNN_TEST_KILL_DURING_WRITE=N: the N-th checkpoint write of the process dies by SIGKILL after its
  // .tmp is complete, before the rename, as a node failure would (tests/signal_test.sh); the write
  // runs on the background writer's thread, so training is at a later step then
  // (tests/async_checkpoint_test.sh). 0: off.
  long kill_at_checkpoint_write = 0;

  // CNN_TEST_NAN_AT=RANK:STEP: a NaN in rank RANK's own gradient in global step STEP (1-based).
  struct NanAt {
    long rank = -1;
    std::int64_t step = 0;
  };
  std::optional<NanAt> nan_at;

  // CNN_TEST_STOP_AFTER_STEPS=N: rank CNN_TEST_STOP_RANK (default 0) raises SIGUSR1 once it has run
  // N steps, so a test stops a run at a chosen step without racing a real signal. 0: off.
  std::int64_t stop_rank = 0;
  std::int64_t stop_after_steps = 0;
  // CNN_TEST_STEP_DELAY_MS=N: every step sleeps N ms after it is timed (timing only), so a test's
  // signal surely arrives mid-run however fast the machine. 0: off.
  std::int64_t step_delay_ms = 0;

  // CNN_TEST_STALL=RANK:STEP:PHASE (e.g. 1:5:forward/backward): that rank stops making progress when
  // it enters PHASE (watchdog.hpp's phase names) at global step STEP, as a hung device would: its
  // training thread sleeps, its watchdog thread runs on.
  // CNN_TEST_SIGSTOP=RANK:STEP:PHASE: the same point, but the whole process stops itself with SIGSTOP,
  // as a hung node or a debugger would: nothing of it runs any more, its watchdog included
  // (tests/flight_recorder_test.sh). CNN_TEST_STALL wins when both are set.
  struct StallAt {
    int rank = -1;
    std::int64_t step = -1;
    std::string phase;
    bool sigstop = false;
  };
  std::optional<StallAt> stall;

  // CNN_TEST_STOP_DURING_WRITE=N: the N-th checkpoint write of the process stops the whole process
  // with SIGSTOP when half of its .tmp is written, as a hung file system or node would
  // (tests/flight_recorder_test.sh). 0: off.
  long stop_at_checkpoint_write = 0;

  // CNN_TEST_PREDICT_BLOCK=N: predict cuts the split into blocks of N images and gives each rank one
  // block per round, so that a small test data set takes several rounds (tests/predict_test.sh).
  // 0: the sizes it picks.
  std::int64_t predict_block = 0;
};

// Reads every CNN_TEST_* variable above, each parsed as the hook always parsed it.
TestHooks read_test_hooks_from_environment();

// Hands the write hooks to the file-writing code (fsync_util.hpp, checkpoint.cpp), which runs deep
// below the trainer; main calls it once, before anything writes.
void install_write_test_hooks(const TestHooks& hooks);

// Set by install_write_test_hooks; defined next to the code they pause or kill.
namespace fsutil {
void set_test_write_pause_ms(long milliseconds);
}
void set_test_kill_at_checkpoint_write(long nth_write);
void set_test_stop_at_checkpoint_write(long nth_write);

}  // namespace cnn
