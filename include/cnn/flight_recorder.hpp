// The flight recorder: each rank keeps its last kFlightRingSize collective calls in a ring (sequence
// number, operation, bytes, phase, global step, start and end times), so that after a hang every rank
// can say which collective it was in, and the ranks can be compared (flight_file.hpp writes a ring out,
// flight_site.hpp says where, and the watchdog compares them to name the ranks that stopped).
//
// The sequence number counts this process's collective calls in program order, from 1. Every rank
// makes the same collective calls in the same order (MPI requires it of a communicator), so the
// same number means the same call on every rank: a rank whose newest number is below the one the
// others wait in has not reached it. Two rules keep the numbers aligned:
//   - every collective is recorded at one level only (MpiWorld, a Communicator, or the direct MPI
//     call of a file that has no other), on every rank alike;
//   - a device collective captured into a CUDA graph is recorded at each replay of the graph, not at
//     the capture (FlightCaptureTally), so an eager step and a replayed one record the same calls.
// Collectives are called from one thread (MPI_THREAD_FUNNELED); the ring is read by the watchdog's
// thread while that thread writes it.
//
// Cost per call: two clock reads (vDSO, no system call), an atomic increment and about ten relaxed
// stores into a fixed array; no allocation, no lock (docs/RELIABILITY.md, "Flight recorder").
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace cnn {

inline constexpr int kFlightRingSize = 64;

enum class CollectiveOp : std::uint8_t {
  kAllreduce,        // MPI_Allreduce (host memory)
  kIallreduce,       // MPI_Iallreduce: ends at the wait (the overlapped CPU step)
  kBroadcast,        // MPI_Bcast
  kBarrier,          // MPI_Barrier
  kGather,           // MPI_Gather
  kGatherv,          // MPI_Gatherv
  kAllgather,        // MPI_Allgather
  kCommSplit,        // MPI_Comm_split_type
  kDeviceAllreduce,  // an allreduce queued on a GPU stream (NCCL, peer memory)
  kDeviceBroadcast,  // a broadcast queued on a GPU stream (NCCL)
};
inline constexpr int kCollectiveOpCount = 10;

enum class CallStatus : std::uint8_t {
  kInFlight,  // started, not ended: the rank is in it (or, for kIallreduce, has not waited yet)
  kDone,
  kFailed,    // the call returned an error
  kQueued,    // a device collective: queued on the stream; the device's completion is not seen here
};
inline constexpr int kCallStatusCount = 4;

const char* collective_op_name(CollectiveOp op);
const char* call_status_name(CallStatus status);

// One call, as read back from the ring.
struct FlightEntry {
  std::uint64_t seq = 0;        // 1-based; 0: an empty slot
  CollectiveOp op = CollectiveOp::kAllreduce;
  CallStatus status = CallStatus::kInFlight;
  int phase = 0;                // the WatchPhase the rank was in (watchdog.hpp)
  std::int64_t step = 0;        // the global step the rank was on (1-based; 0 before the first)
  std::int64_t bytes = 0;       // this rank's send buffer
  std::int64_t start_ns = 0;    // UTC, ns since the Unix epoch
  std::int64_t end_ns = 0;      // 0: not ended
};

// Records the start of a collective; returns its sequence number.
std::uint64_t flight_begin(CollectiveOp op, std::int64_t bytes) noexcept;
// Records its end. A call whose slot was reused meanwhile (64 later calls started first) is dropped.
void flight_end(std::uint64_t seq, CallStatus status = CallStatus::kDone) noexcept;
// Marks the call failed and writes this rank's ring to the flight site, if one is installed, with
// `why` (flight_site.hpp). The caller rethrows.
void flight_failed(std::uint64_t seq, const char* why) noexcept;
// A device collective queued on a stream: recorded as started and queued at once, or, while a
// FlightCaptureTally is open on this thread, only tallied for the graph being captured (returns 0).
std::uint64_t flight_record_queued(CollectiveOp op, std::int64_t bytes) noexcept;

// A blocking collective: records it around `call`; an exception from `call` (CNN_CHECK_MPI's) marks
// it failed, writes the ring, and passes on.
template <class Call>
void recorded_collective(CollectiveOp op, std::int64_t bytes, Call&& call) {
  const std::uint64_t seq = flight_begin(op, bytes);
  try {
    call();
  } catch (const std::exception& e) {
    flight_failed(seq, e.what());
    throw;
  }
  flight_end(seq);
}

// A device collective: records it as queued and runs `call`, which queues it (on failure as above).
template <class Call>
void recorded_queued_collective(CollectiveOp op, std::int64_t bytes, Call&& call) {
  const std::uint64_t seq = flight_record_queued(op, bytes);
  try {
    call();
  } catch (const std::exception& e) {
    if (seq != 0) flight_failed(seq, e.what());
    throw;
  }
}

// The newest sequence number started by this process (0: none).
std::uint64_t flight_entered() noexcept;

// The ring's entries, oldest first (at most kFlightRingSize). Allocates: for the watchdog's thread
// and the failure path, never for the hot path.
std::vector<FlightEntry> flight_snapshot();

// While one is open on a thread, that thread's flight_record_queued calls are tallied here instead of
// recorded: a CUDA graph is being captured, and the collectives it holds are recorded at each replay
// (record_replay). Not nested.
class FlightCaptureTally {
 public:
  struct Call {
    CollectiveOp op;
    std::int64_t bytes;
  };
  FlightCaptureTally();
  ~FlightCaptureTally();
  FlightCaptureTally(const FlightCaptureTally&) = delete;
  FlightCaptureTally& operator=(const FlightCaptureTally&) = delete;
  std::vector<Call> take() { return std::move(calls_); }
  // What the tally held, recorded as queued: the replay of a graph that captured them.
  static void record_replay(const std::vector<Call>& calls) noexcept;

 private:
  std::vector<Call> calls_;
};

// For the unit test: empties the ring and restarts the numbers at 1.
void flight_reset_for_test() noexcept;

}  // namespace cnn
