#include "cnn/watchdog.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "cnn/collective_errors.hpp"
#include "cnn/errors.hpp"
#include "cnn/flight_recorder.hpp"
#include "cnn/flight_site.hpp"
#include "cnn/flight_writer.hpp"
#include "cnn/phase_times.hpp"
#include "cnn/signals.hpp"

namespace cnn {

namespace {

// Written by the training thread, read by the watchdog thread. Relaxed order is enough: the watchdog
// only needs to see the counter move eventually, and a late view merely delays a verdict by a tick.
std::atomic<std::uint64_t> g_beats{0};
std::atomic<int> g_phase{static_cast<int>(WatchPhase::kIdle)};
std::atomic<std::int64_t> g_step{0};

// Test hook CNN_TEST_STALL (TestHooks::stall): this rank stops making progress when it enters the
// phase at the global step, as a hung device, file system or peer would.
struct StallHook {
  bool armed = false;
  bool sigstop = false;  // CNN_TEST_SIGSTOP: stop the whole process instead
  std::int64_t step = -1;
  int phase = -1;
};
StallHook g_hook;
std::atomic<bool> g_hook_armed{false};

constexpr const char* kPhaseNames[kWatchPhaseCount] = {
    "idle",      "data",      "forward/backward", "non-finite check", "allreduce",  "update", "step-end agreement",
    "eval",      "eval reduction", "log write",   "checkpoint write", "checkpoint wait", "steps in one launch",
    "steps in one launch, exchanging with the other ranks"};

StallHook stall_hook_for(const std::optional<TestHooks::StallAt>& stall, int rank) {
  StallHook hook;
  if (!stall) return hook;
  for (int p = 0; p < kWatchPhaseCount; ++p)
    if (stall->phase == kPhaseNames[p]) hook.phase = p;
  hook.step = stall->step;
  hook.sigstop = stall->sigstop;
  hook.armed = hook.phase >= 0 && stall->rank == rank;  // an unknown phase name means off
  return hook;
}

void stall_here() {
  if (g_hook.sigstop) {
    g_hook_armed.store(false, std::memory_order_relaxed);  // once: after SIGCONT the rank goes on
    std::raise(SIGSTOP);
    return;
  }
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", s);
  return text;
}

}  // namespace

const char* watch_phase_name(WatchPhase phase) { return kPhaseNames[static_cast<int>(phase)]; }

bool was_suspended(double gap_seconds, double tick_seconds) {
  return gap_seconds > 2 * tick_seconds + kSuspendedSlackSeconds;
}

bool waits_for_peers(WatchPhase phase) {
  switch (phase) {
    case WatchPhase::kAllreduce:
    case WatchPhase::kStepEnd:
    case WatchPhase::kEvalReduce:
    case WatchPhase::kCheckpointWait:
    case WatchPhase::kStepChunkExchange:
      return true;
    default:
      return false;
  }
}

void heartbeat(WatchPhase phase) {
  const int p = static_cast<int>(phase);
  g_phase.store(p, std::memory_order_relaxed);
  g_beats.fetch_add(1, std::memory_order_relaxed);
  if (g_hook_armed.load(std::memory_order_relaxed) && p == g_hook.phase &&
      g_step.load(std::memory_order_relaxed) == g_hook.step)
    stall_here();
}

void heartbeat_step(std::int64_t global_step) {
  g_step.store(global_step, std::memory_order_relaxed);
  g_beats.fetch_add(1, std::memory_order_relaxed);
}

WatchPhase current_watch_phase() noexcept { return static_cast<WatchPhase>(g_phase.load(std::memory_order_relaxed)); }
std::int64_t current_global_step() noexcept { return g_step.load(std::memory_order_relaxed); }
std::uint64_t heartbeat_count() noexcept { return g_beats.load(std::memory_order_relaxed); }

StallVerdict judge_stall(WatchPhase phase, double silent_seconds, double timeout_seconds, int pending_signal,
                         int rank) {
  StallVerdict verdict;
  if (phase == WatchPhase::kIdle || timeout_seconds <= 0) return verdict;
  const bool waiting = waits_for_peers(phase);
  const double stagger = std::min(kRankStaggerSeconds * rank, kMaxRankStaggerSeconds);
  verdict.limit = waiting ? timeout_seconds + std::max(kMinWaitGraceSeconds, timeout_seconds / 4) + stagger
                          : timeout_seconds;
  if (waiting && pending_signal != 0 && kStopSignalGraceSeconds < verdict.limit) {
    verdict.limit = kStopSignalGraceSeconds;
    verdict.signal_exit = true;
    verdict.quiet = rank != 0;
  }
  verdict.fire = silent_seconds > verdict.limit;
  return verdict;
}

Watchdog::Watchdog(double timeout_seconds, int rank, const std::string& host,
                   const std::optional<TestHooks::StallAt>& stall, std::shared_ptr<const FlightSite> flight,
                   const PeerProbe* peers)
    : timeout_(timeout_seconds), rank_(rank), host_(host), flight_(std::move(flight)), peers_(peers) {
  g_hook = stall_hook_for(stall, rank);
  g_hook_armed.store(g_hook.armed, std::memory_order_relaxed);
  heartbeat(WatchPhase::kIdle);
  if (timeout_ <= 0) return;
  if (flight_) writer_ = std::make_unique<FlightWriter>(flight_);
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  if (thread_.joinable()) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
    writer_.reset();  // after the thread, which uses it
  }
  heartbeat(WatchPhase::kIdle);
}

void Watchdog::run() {
  // Ten looks per timeout, at least ten a second: a verdict is late by at most a tenth, and a stop
  // signal in a wait is seen well before mpirun's SIGKILL follows its SIGTERM (a second later).
  const auto tick = std::chrono::duration<double>(std::clamp(timeout_ / 10, 0.02, 0.1));
  std::uint64_t seen = g_beats.load(std::memory_order_relaxed);
  double since = wall_seconds();
  double last_look = since;
  bool probed_this_silence = false, probed_for_signal = false;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, tick, [this] { return stopping_; })) {
    if (peers_ != nullptr) peers_->accept_pending();  // other ranks' probes must find room
    const std::uint64_t beats = g_beats.load(std::memory_order_relaxed);
    const double now = wall_seconds();
    const bool resumed = was_suspended(now - last_look, tick.count());
    last_look = now;
    // A process that was stopped as a whole (SIGSTOP, then the launcher's SIGCONT before its SIGTERM)
    // cannot tell its own stall from the stop: its silence starts again now, so the job's one line
    // stays the one a waiting rank printed.
    if (beats != seen || resumed) {
      seen = beats;
      since = now;
      probed_this_silence = false;
      continue;
    }
    const auto phase = static_cast<WatchPhase>(g_phase.load(std::memory_order_relaxed));
    keep_record(now - since, since, phase);
    if (peers_ != nullptr && waits_for_peers(phase) && timeout_ > 0 && !peers_->end_reported()) {
      // A pending signal with no announced end: the launcher may be tearing the job down over a lost
      // node. Without a signal, a wait as long as the timeout: is a peer out of reach?
      const int signo = local_stop_signal();
      const bool signalled = signo != 0 && !probed_for_signal && now - since > kSignalProbeSilenceSeconds;
      const bool overdue = signo == 0 && !probed_this_silence && now - since > timeout_;
      if (signalled || overdue) {
        probed_for_signal = probed_for_signal || signalled;
        probed_this_silence = true;
        stop_if_peers_missing(phase, now - since, signo);
      }
    }
    const StallVerdict verdict = judge_stall(phase, now - since, timeout_, local_stop_signal(), rank_);
    if (verdict.fire) fire(phase, now - since, verdict);
  }
}

// Once per silence (and again should its newest collective change within it). Not removed when the
// rank moves on: after an abort, the stopped rank that the launcher wakes (SIGCONT) lets the others
// finish the collective they waited in, and their records must still say where they were.
void Watchdog::keep_record(double silent_seconds, double silent_since, WatchPhase phase) {
  if (!writer_ || phase == WatchPhase::kIdle || silent_seconds <= flight_->publish_after || flight_record_is_final())
    return;
  const std::uint64_t entered = flight_entered();
  if (silent_since == published_since_ && entered == published_entered_) return;
  published_since_ = silent_since;
  published_entered_ = entered;
  writer_->publish("no progress for " + seconds_text(silent_seconds) + " in phase " + watch_phase_name(phase) +
                   " (written for the other ranks' watchdogs, at half the job's smallest --stall-timeout)");
}

std::string Watchdog::arrivals_text() {
  const std::uint64_t entered = flight_entered();
  std::string text = ", in collective #" + std::to_string(entered);
  for (const FlightEntry& e : flight_snapshot())
    if (e.seq == entered)
      text += std::string(" (") + collective_op_name(e.op) + " of " + std::to_string(e.bytes) + " B, " +
              call_status_name(e.status) + ")";
  const std::optional<Arrivals> arrivals = writer_->arrivals(entered, kFlightReadSeconds);
  text += ": ";
  text += arrivals ? describe_arrivals(*arrivals, flight_->hosts)
                   : "the other ranks' flight records could not be read within " + seconds_text(kFlightReadSeconds);
  return text + "; flight records: " + flight_->dir;
}

void Watchdog::stop_if_peers_missing(WatchPhase phase, double silent_seconds, int signo) {
  const std::vector<PeerState> states = peers_->probe(kPeerProbeSeconds);
  const std::string missing = describe_unanswered(peers_->hosts(), states, kPeerProbeSeconds);
  if (missing.empty()) return;  // every peer answers: a stalled one reports itself
  // A peer that reported the job's end announced it before it went: its absence is no news.
  peers_->accept_pending();
  if (peers_->end_reported()) return;
  // One line for the job: the lowest rank that answers speaks and stops the job; the others wait for
  // that (an abort of theirs could end the speaker before its line), as they would without the probe.
  for (int r = 0; r < rank_; ++r)
    if (states[static_cast<std::size_t>(r)] == PeerState::kAnswers) return;
  const std::string who = "rank " + std::to_string(rank_) + " on " + host_;
  const std::string where = std::string("phase ") + watch_phase_name(phase) + " at global step " +
                            std::to_string(g_step.load(std::memory_order_relaxed));
  if (signo != 0) {
    const std::string line = who + ": " + signal_name(signo) + " arrived while waiting for other ranks in " + where +
                             ": " + missing + "; no checkpoint can be written, stopping now (the last checkpoint is "
                             "intact)";
    print_error_line(line);
    peers_->announce_end(states);
    if (writer_) writer_->publish_and_wait(line, kFlightFinalWriteSeconds);
    _exit(128 + signo);
  }
  const std::string line = who + " waited " + seconds_text(silent_seconds) + " for other ranks in " + where +
                           " (--stall-timeout " + seconds_text(timeout_) + "): " + missing + "; aborting the job";
  print_error_line(line);
  peers_->announce_end(states);
  if (writer_) writer_->publish_and_wait(line, kFlightFinalWriteSeconds);
  alarm(10);  // as in fire()
  MPI_Abort(MPI_COMM_WORLD, static_cast<int>(ExitCode::kStalled));
  _exit(static_cast<int>(ExitCode::kStalled));
}

void Watchdog::fire(WatchPhase phase, double silent_seconds, const StallVerdict& verdict) {
  const std::string who = "rank " + std::to_string(rank_) + " on " + host_;
  const std::string where = std::string("phase ") + watch_phase_name(phase) + " at global step " +
                            std::to_string(g_step.load(std::memory_order_relaxed));
  if (verdict.signal_exit) {
    const int signo = local_stop_signal();
    const std::string line = who + ": " + signal_name(signo) + " arrived while waiting for other ranks in " + where +
                             ", and nothing moved for " + seconds_text(silent_seconds) +
                             ": a peer rank is gone, so no checkpoint can be written; stopping now (the last "
                             "checkpoint is intact)";
    if (!verdict.quiet) {
      print_error_line(line);
      if (peers_ != nullptr) peers_->announce_end();
    }
    if (writer_) writer_->publish_and_wait(line, kFlightFinalWriteSeconds);
    _exit(128 + signo);
  }
  std::string line;
  if (waits_for_peers(phase)) {
    line = who + " waited " + seconds_text(silent_seconds) + " for other ranks in " + where + " (--stall-timeout " +
           seconds_text(timeout_) + " plus grace)" +
           (writer_ ? arrivals_text() : std::string(": a peer rank is dead or stalled")) + "; aborting the job";
  } else {
    line = who + " stalled: no progress for " + seconds_text(silent_seconds) + " in " + where + " (--stall-timeout " +
           seconds_text(timeout_) + ")" +
           (writer_ ? ", after collective #" + std::to_string(flight_entered()) + "; flight records: " + flight_->dir
                    : std::string()) +
           "; aborting the job";
  }
  print_error_line(line);
  if (peers_ != nullptr) peers_->announce_end();  // the others stay quiet while the job is torn down
  if (writer_) writer_->publish_and_wait(line, kFlightFinalWriteSeconds);
  // MPI_Abort from this thread goes beyond MPI_THREAD_FUNNELED's promise; not hanging the allocation
  // matters more here. Should the abort itself hang (a broken runtime), SIGALRM ends this process.
  alarm(10);
  MPI_Abort(MPI_COMM_WORLD, static_cast<int>(ExitCode::kStalled));
  _exit(static_cast<int>(ExitCode::kStalled));
}

}  // namespace cnn
