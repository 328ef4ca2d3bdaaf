#include "cnn/signals.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <thread>

#include "cnn/errors.hpp"

namespace cnn {

namespace {

// The only state a handler may touch: async-signal-safe by definition.
volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_first_signal_second = 0;  // CLOCK_MONOTONIC seconds of the first signal
// mirror_stop_signal's word (a backend's chunk stop word), or null. Lock-free, so the handler may read it.
std::atomic<volatile int*> g_mirror{nullptr};
static_assert(std::atomic<volatile int*>::is_always_lock_free, "the handler reads g_mirror");

// One request often arrives twice: SLURM signals every process of the job and mpirun forwards its own
// copy; Ctrl-C reaches mpirun and the ranks of its process group, and mpirun then sends SIGTERM.
// A repeat within this window is that same request; a later one is the user insisting.
constexpr long kDuplicateWindowSeconds = 2;

long monotonic_seconds() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe (POSIX.1-2008)
  return static_cast<long>(now.tv_sec);
}

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1};
constexpr int kShellSignalBase = 128;  // what a shell reports for a death by signal N

extern "C" void on_stop_signal(int signo) {
  if (g_stop_signal != 0) {
    if (monotonic_seconds() - g_first_signal_second < kDuplicateWindowSeconds) return;
    // The second signal: the user (or the scheduler) will not wait for the checkpoint. _exit is
    // async-signal-safe; a write in progress only ever left NAME.h5.tmp, which the next start removes.
    std::signal(signo, SIG_DFL);
    _exit(kShellSignalBase + signo);
  }
  g_first_signal_second = static_cast<std::sig_atomic_t>(monotonic_seconds());
  g_stop_signal = signo;
  // A chunk of steps running inside one kernel polls this word: it stops at the next step boundary.
  if (volatile int* word = g_mirror.load(std::memory_order_relaxed)) *word = signo;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a read() or MPI progress poll interrupted by the signal carries on; the flag is
  // looked at between steps, never inside a library call.
  action.sa_flags = SA_RESTART;
  for (const int signo : kStopSignals) {
    if (sigaction(signo, &action, nullptr) != 0)
      fail_call("libc", "sigaction", std::strerror(errno), __FILE__, __LINE__);
  }
}

int local_stop_signal() { return g_stop_signal; }

void mirror_stop_signal(volatile int* word) {
  g_mirror.store(word, std::memory_order_seq_cst);
  // A signal that came before: the chunk must see it too (the handler only stores the first one).
  if (word != nullptr && g_stop_signal != 0) *word = g_stop_signal;
}

const char* signal_name(int signo) {
  switch (signo) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

int agree_on_stop(const MpiWorld& world) {
  if (world.size() == 1) return local_stop_signal();
  return world.allreduce_max(static_cast<int>(local_stop_signal()));
}

StepBoundary agree_at_step_boundary(const MpiWorld& world, bool checkpoint_failed) {
  // Above every signal number: MPI_MAX keeps the flag when any rank sets it (the signal part of the
  // maximum is then one rank's only, which does not matter: the failed write ends the run).
  constexpr int kCheckpointFailed = 1 << 16;
  const int mine = static_cast<int>(local_stop_signal()) | (checkpoint_failed ? kCheckpointFailed : 0);
  const int all = world.size() == 1 ? mine : world.allreduce_max(mine);
  return StepBoundary{all & (kCheckpointFailed - 1), (all & kCheckpointFailed) != 0};
}

StopAfterStepsHook::StopAfterStepsHook(const TestHooks& hooks, int rank) {
  if (rank == hooks.stop_rank) stop_after_ = hooks.stop_after_steps;
  step_delay_ms_ = hooks.step_delay_ms;
}

void StopAfterStepsHook::after_step(std::int64_t steps_run) const {
  if (step_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_delay_ms_));
  if (stop_after_ > 0 && steps_run == stop_after_) std::raise(SIGUSR1);
}

}  // namespace cnn
