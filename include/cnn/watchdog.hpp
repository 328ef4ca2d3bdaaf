// The stall watchdog (--stall-timeout). A rank that makes no progress must not hang a cluster
// allocation: the trainer marks each phase it enters with heartbeat() (a relaxed atomic store, a few
// per step), and a thread per rank aborts the whole job (MPI_Abort) with one line naming the rank
// and the phase when no heartbeat came for the timeout.
//
// Naming the right rank: when rank 1 stalls in its forward pass, the other ranks sit in the gradient
// allreduce waiting for it, and make no progress either. Phases that only wait for other ranks
// (allreduce, agreements, a checkpoint being written by rank 0) therefore get a grace margin on top
// of the timeout, so the stalled rank's watchdog fires first and its MPI_Abort ends the others before
// theirs would. Without an abort from the stalled rank (a rank killed outright while the launcher
// keeps the others alive), the waiting ranks fire after the grace, saying they waited for a peer.
//
// Naming the ranks that stopped (flight_verdict.hpp): with a flight site (flight_site.hpp), every rank
// writes its flight recorder ring to RUN_DIR/flight once it has seen half the smallest timeout of the
// job pass without progress, so the waiting rank whose watchdog fires first reads which collective each
// other rank had reached and names those that had not reached the one it waits in. The file I/O runs
// on a thread of its own (flight_writer.hpp): a hung file system must not hang the watchdog.
//
// A stop signal (SIGTERM from mpirun tearing the job down after a rank died) shortens the wait of a
// waiting phase to kStopSignalGraceSeconds: a peer that is gone will never join the collective, so the
// checkpoint the signal asks for cannot be written; the rank exits with 128 + signo at once instead of
// until the launcher's SIGKILL (odls_base_sigkill_timeout may be raised to minutes).
//
// Lost and unreachable peers (peer_probe.hpp). A peer whose process is gone, or whose node is cut off,
// never reports its own stall, so a waiting rank asks the peers directly (a TCP probe, no MPI):
//  - when a waiting phase has been silent for the timeout itself, before the grace; and
//  - when a stop signal is pending in a waiting phase (mpirun's SIGTERM after it lost a node's daemon:
//    the launcher's SIGKILL follows one second later, so the watchdog looks every 0.1 s).
// If some peer is gone or unreachable, the lowest rank that still answers prints one line naming those
// hosts and ranks, and stops the job at once: MPI_Abort, or exit 128 + signo with a signal pending.
// If every peer answers, nothing changes: a stalled peer reports itself. A rank that reports the job's
// end (any abort) announces it to the others first, and a rank that heard it never probes: the
// teardown that follows is not a lost peer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cnn/peer_probe.hpp"
#include "cnn/test_hooks.hpp"

namespace cnn {

struct FlightSite;    // flight_site.hpp
class FlightWriter;   // flight_writer.hpp

// What a rank is doing. kIdle: outside the training loop; the watchdog never fires there.
enum class WatchPhase : int {
  kIdle,
  kData,             // the epoch's sample order and the step's batch
  kForwardBackward,  // this rank's gradients (backend compute)
  kNonFiniteCheck,   // the divergence check of the gradients
  kAllreduce,        // waits for peers: the gradient allreduce
  kUpdate,           // the optimizer step
  kStepEnd,          // waits for peers: the per-step stop agreement and the epoch's reductions
  kEval,             // this rank's share of the test set
  kEvalReduce,       // waits for peers: the test stats' reduction
  kLog,              // rank 0 appends to the run's logs
  kCheckpoint,       // rank 0 writes a checkpoint
  kCheckpointWait,   // waits for peers: the other ranks wait for rank 0's checkpoint verdict
  kStepChunk,        // a chunk of whole steps in one backend call (chunk_plan.hpp), one rank: a
                     // heartbeat as each step completes (StepChunk::on_progress)
  kStepChunkExchange,  // the same on 2+ ranks, the gradient exchange inside the call: every step
                       // waits for the other ranks, as the allreduce does
};
inline constexpr int kWatchPhaseCount = 14;

const char* watch_phase_name(WatchPhase phase);
// True for phases that only wait for other ranks (they get the grace margin).
bool waits_for_peers(WatchPhase phase);

// The default of --stall-timeout, in seconds. A step of the seed model takes milliseconds, an
// evaluation or a checkpoint of it a second at most, even on a slow shared file system: five minutes
// of no progress is a stall, and it wastes at most five minutes of an allocation.
inline constexpr double kDefaultStallTimeoutSeconds = 300.0;
// Added to the timeout of the waiting phases, so the stalled rank reports first.
inline constexpr double kMinWaitGraceSeconds = 5.0;
// The wait in a waiting phase once a stop signal is pending (see above).
inline constexpr double kStopSignalGraceSeconds = 5.0;
// With a stop signal pending, the silence in a waiting phase before the peers are probed: a healthy
// stop passes its collectives faster than this.
inline constexpr double kSignalProbeSilenceSeconds = 0.25;

// Marks the start of `phase` on this rank (any thread; cheap enough for every phase of every step).
void heartbeat(WatchPhase phase);
// The global step the rank is on, for the message.
void heartbeat_step(std::int64_t global_step);
// What the heartbeats say now (any thread), for the flight recorder.
WatchPhase current_watch_phase() noexcept;
std::int64_t current_global_step() noexcept;
std::uint64_t heartbeat_count() noexcept;

// The parts of the decision the thread makes, separated for the unit test.
// One abort, one line. When a rank is stopped (SIGSTOP) or dead, every other rank waits, and each
// would report it. So the waiting ranks fire one after another: rank 0 first (it speaks for the job),
// then rank r after r more seconds (at most kMaxRankStaggerSeconds), and the first abort ends the
// others. A rank that then gets the launcher's SIGTERM while it waits exits silently unless it is
// rank 0: the line that explains the job's end has been printed by the rank that aborted it.
inline constexpr double kRankStaggerSeconds = 1.0;
inline constexpr double kMaxRankStaggerSeconds = 10.0;

// True when the watchdog's own look came this much later than its tick: the whole process was
// suspended (SIGSTOP, a paused VM), not only the thread it watches.
inline constexpr double kSuspendedSlackSeconds = 1.0;
bool was_suspended(double gap_seconds, double tick_seconds);

// How long a firing watchdog waits for the other ranks' flight records to be read, and for its own to
// be written, before its abort: under kRankStaggerSeconds, so that the next waiting rank's watchdog
// does not fire (a second line) while this one still reads.
inline constexpr double kFlightReadSeconds = 0.5;
inline constexpr double kFlightFinalWriteSeconds = 0.2;

struct StallVerdict {
  bool fire = false;
  bool signal_exit = false;  // a stop signal is pending: exit 128 + signo, a peer is gone
  bool quiet = false;        // exit without a line (signal_exit on ranks other than 0)
  double limit = 0.0;        // the silence allowed in this phase, seconds
};
StallVerdict judge_stall(WatchPhase phase, double silent_seconds, double timeout_seconds, int pending_signal,
                         int rank = 0);

// The watchdog thread of one rank, from construction to destruction (RAII: the trainer owns one for
// its loop). timeout_seconds <= 0: off (no thread). `stall`: the test hooks CNN_TEST_STALL and
// CNN_TEST_SIGSTOP (test_hooks.hpp). `flight`: where the ranks' flight records go; null: none (the
// abort's line then cannot name the ranks that stopped). `peers`: the probe of the other ranks (null:
// one rank, or none), which must outlive the watchdog.
class Watchdog {
 public:
  Watchdog(double timeout_seconds, int rank, const std::string& host,
           const std::optional<TestHooks::StallAt>& stall = std::nullopt,
           std::shared_ptr<const FlightSite> flight = nullptr, const PeerProbe* peers = nullptr);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void run();
  // Writes this rank's ring for the others when it has been silent long enough.
  void keep_record(double silent_seconds, double silent_since, WatchPhase phase);
  [[noreturn]] void fire(WatchPhase phase, double silent_seconds, const StallVerdict& verdict);
  // ", in collective #N (...): rank R on H has not reached it; flight records: DIR" for the line.
  std::string arrivals_text();
  // Probes the peers; stops the job when some are gone or unreachable (see above), else returns.
  void stop_if_peers_missing(WatchPhase phase, double silent_seconds, int signo);

  double timeout_;
  int rank_;
  std::string host_;
  std::shared_ptr<const FlightSite> flight_;
  std::unique_ptr<FlightWriter> writer_;  // null without a flight site or a thread
  double published_since_ = -1.0;         // the start of the silence this rank's record was written in
  std::uint64_t published_entered_ = 0;   // the newest collective that record shows
  const PeerProbe* peers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cnn
