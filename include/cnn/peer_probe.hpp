// Which other ranks can still be reached, and where they run. A rank that waits in a collective learns
// nothing from MPI about a peer that never comes: it may be slow, its process may be gone (its node
// crashed, or was killed), or its node may be cut off. The watchdog (watchdog.hpp) asks this probe
// before it gives up, so that its one line names the lost or unreachable host and ranks.
//
// How: at start-up every rank opens a TCP listening socket (any address, a port the kernel picks) and
// the ranks swap their host names, IPv4 addresses and ports (one MPI_Allgather). The probe later tries
// a TCP connection to every peer, on every address it published, all at once, without MPI:
//   - a connection that completes: the peer's process exists (the kernel answers even for a stopped
//     process, whose accept queue the watchdog thread drains each tick);
//   - refused (on any address, none completing): the peer's host answers, but nothing listens on the
//     port any more: the process is gone;
//   - no answer before the deadline (or no route): the peer's host is unreachable.
// A probe costs one connection attempt per peer and runs only when a job is already waiting too long.
//
// One line per job. A rank that reports the job's end itself (the watchdog's abort, any error that ends
// in MPI_Abort) first tells every peer so through the same sockets (announce_end()). The launcher then
// tears the job down, which looks to a probe just like a lost peer (the reporter is gone); a rank that
// heard the announcement stays quiet instead of adding a second, wrong line.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "cnn/communicator.hpp"

namespace cnn {

enum class PeerState { kAnswers, kGone, kUnreachable };

// The seconds a probe waits for a peer's answer. A node on the same network answers in well under a
// millisecond; under mpirun, the probe must also end before the launcher's SIGKILL, one second after
// its SIGTERM (odls_base_sigkill_timeout).
inline constexpr double kPeerProbeSeconds = 0.5;

// What a probe found, in words, by host: "lost host n2 (ranks 2-3: process gone); host n3 unreachable
// (rank 4: no answer within 0.5 s)". Empty when every peer answers. `hosts` and `states` are per rank.
std::string describe_unanswered(const std::vector<std::string>& hosts, const std::vector<PeerState>& states,
                                double probe_seconds);

class PeerProbe {
 public:
  // Collective over the world: opens this rank's listener and swaps addresses with every rank.
  explicit PeerProbe(const MpiWorld& world);
  ~PeerProbe();
  PeerProbe(const PeerProbe&) = delete;
  PeerProbe& operator=(const PeerProbe&) = delete;

  // Accepts and closes the connections other ranks' probes left in this rank's queue, and notes an
  // announced end (the watchdog thread, every tick).
  void accept_pending() const;
  // One state per rank (this rank: kAnswers). Not collective; blocks at most about `seconds` per 512 peers.
  std::vector<PeerState> probe(double seconds) const { return reach(seconds, kProbeByte, {}); }
  // Tells every peer that this rank reports the job's end (before it aborts the job); `known`: a probe's
  // states, whose gone and unreachable ranks are not waited for again.
  void announce_end(const std::vector<PeerState>& known = {}) const { reach(kPeerProbeSeconds, kEndByte, known); }
  // Has a peer announced that it reports the job's end?
  bool end_reported() const { return end_reported_.load(std::memory_order_relaxed); }

  // The probe of this process while one exists (MpiWorld::abort announces through it), else null.
  static const PeerProbe* active();

  int rank() const { return rank_; }
  const std::vector<std::string>& hosts() const { return hosts_; }

 private:
  struct Peer {
    std::uint16_t port = 0;
    std::vector<std::uint32_t> addresses;  // IPv4, network byte order
  };
  static constexpr char kProbeByte = 'P', kEndByte = 'E';
  std::vector<PeerState> reach(double seconds, char message, const std::vector<PeerState>& known) const;

  int rank_ = 0;
  int listener_ = -1;
  mutable std::atomic<bool> end_reported_{false};
  std::vector<std::string> hosts_;
  std::vector<Peer> peers_;
};

}  // namespace cnn
