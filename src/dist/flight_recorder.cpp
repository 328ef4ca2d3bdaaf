#include "cnn/flight_recorder.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "cnn/flight_site.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

namespace {

// One slot of the ring, a sequence lock: `version` is odd while the writer changes the slot, and a
// reader keeps a copy only if it read the same even version before and after. Every field is a
// relaxed atomic, so the race with the reader is defined; on x86-64 and AArch64 each is a plain load
// or store.
struct alignas(64) Slot {
  std::atomic<std::uint64_t> version{0};
  std::atomic<std::uint64_t> seq{0};
  std::atomic<std::uint32_t> packed{0};  // op | status << 8 | phase << 16
  std::atomic<std::int64_t> step{0};
  std::atomic<std::int64_t> bytes{0};
  std::atomic<std::int64_t> start_ns{0};
  std::atomic<std::int64_t> end_ns{0};
};

// A slot per cache line (alignas above): 4 KiB in all, allocated with the program.
Slot g_ring[kFlightRingSize];
std::atomic<std::uint64_t> g_entered{0};

// The capture being tallied on this thread (FlightCaptureTally), or null.
thread_local std::vector<FlightCaptureTally::Call>* t_tally = nullptr;

constexpr const char* kOpNames[kCollectiveOpCount] = {
    "allreduce", "iallreduce", "bcast", "barrier", "gather", "gatherv", "allgather", "comm_split",
    "dev_allreduce", "dev_bcast"};
constexpr const char* kStatusNames[kCallStatusCount] = {"in-flight", "done", "failed", "queued"};

std::int64_t utc_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::uint32_t pack(CollectiveOp op, CallStatus status, int phase) noexcept {
  return static_cast<std::uint32_t>(op) | static_cast<std::uint32_t>(status) << 8 |
         static_cast<std::uint32_t>(phase & 0xffff) << 16;
}

class SlotWrite {
 public:
  explicit SlotWrite(Slot& slot) noexcept : slot_(slot), version_(slot.version.load(std::memory_order_relaxed)) {
    slot_.version.store(version_ + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  ~SlotWrite() { slot_.version.store(version_ + 2, std::memory_order_release); }
  SlotWrite(const SlotWrite&) = delete;
  SlotWrite& operator=(const SlotWrite&) = delete;

 private:
  Slot& slot_;
  std::uint64_t version_;
};

std::uint64_t begin_call(CollectiveOp op, CallStatus status, std::int64_t bytes) noexcept {
  const std::uint64_t seq = g_entered.fetch_add(1, std::memory_order_acq_rel) + 1;
  Slot& slot = g_ring[seq % kFlightRingSize];
  const std::int64_t now = utc_ns();
  const SlotWrite write(slot);
  slot.seq.store(seq, std::memory_order_relaxed);
  slot.packed.store(pack(op, status, static_cast<int>(current_watch_phase())), std::memory_order_relaxed);
  slot.step.store(current_global_step(), std::memory_order_relaxed);
  slot.bytes.store(bytes, std::memory_order_relaxed);
  slot.start_ns.store(now, std::memory_order_relaxed);
  slot.end_ns.store(status == CallStatus::kQueued ? now : 0, std::memory_order_relaxed);  // queued: one clock read
  return seq;
}

}  // namespace

const char* collective_op_name(CollectiveOp op) { return kOpNames[static_cast<int>(op)]; }
const char* call_status_name(CallStatus status) { return kStatusNames[static_cast<int>(status)]; }

std::uint64_t flight_begin(CollectiveOp op, std::int64_t bytes) noexcept {
  return begin_call(op, CallStatus::kInFlight, bytes);
}

void flight_end(std::uint64_t seq, CallStatus status) noexcept {
  Slot& slot = g_ring[seq % kFlightRingSize];
  if (slot.seq.load(std::memory_order_relaxed) != seq) return;  // overwritten by a newer call
  const std::int64_t now = utc_ns();
  const SlotWrite write(slot);
  const std::uint32_t packed = slot.packed.load(std::memory_order_relaxed);
  slot.packed.store((packed & ~0xff00u) | static_cast<std::uint32_t>(status) << 8, std::memory_order_relaxed);
  slot.end_ns.store(now, std::memory_order_relaxed);
}

void flight_failed(std::uint64_t seq, const char* why) noexcept {
  flight_end(seq, CallStatus::kFailed);
  write_flight_record_now(std::string("collective #") + std::to_string(seq) + " failed: " + why);
}

std::uint64_t flight_record_queued(CollectiveOp op, std::int64_t bytes) noexcept {
  if (t_tally != nullptr) {
    try {
      t_tally->push_back({op, bytes});
    } catch (...) {  // out of memory while capturing: the capture itself will fail next
    }
    return 0;
  }
  return begin_call(op, CallStatus::kQueued, bytes);
}

std::uint64_t flight_entered() noexcept { return g_entered.load(std::memory_order_acquire); }

std::vector<FlightEntry> flight_snapshot() {
  std::vector<FlightEntry> entries;
  entries.reserve(kFlightRingSize);
  for (Slot& slot : g_ring) {
    // A slot being rewritten as we read is retried a few times, then left out: the writer is
    // moving, which is not the state a stall dump is about.
    for (int attempt = 0; attempt < 8; ++attempt) {
      const std::uint64_t before = slot.version.load(std::memory_order_acquire);
      if (before & 1u) continue;
      FlightEntry e;
      e.seq = slot.seq.load(std::memory_order_relaxed);
      const std::uint32_t packed = slot.packed.load(std::memory_order_relaxed);
      e.step = slot.step.load(std::memory_order_relaxed);
      e.bytes = slot.bytes.load(std::memory_order_relaxed);
      e.start_ns = slot.start_ns.load(std::memory_order_relaxed);
      e.end_ns = slot.end_ns.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (slot.version.load(std::memory_order_relaxed) != before) continue;
      e.op = static_cast<CollectiveOp>(std::min<std::uint32_t>(packed & 0xffu, kCollectiveOpCount - 1));
      e.status = static_cast<CallStatus>(std::min<std::uint32_t>(packed >> 8 & 0xffu, kCallStatusCount - 1));
      e.phase = static_cast<int>(packed >> 16);
      if (e.seq != 0) entries.push_back(e);
      break;
    }
  }
  std::sort(entries.begin(), entries.end(), [](const FlightEntry& a, const FlightEntry& b) { return a.seq < b.seq; });
  return entries;
}

FlightCaptureTally::FlightCaptureTally() { t_tally = &calls_; }
FlightCaptureTally::~FlightCaptureTally() { t_tally = nullptr; }

void FlightCaptureTally::record_replay(const std::vector<Call>& calls) noexcept {
  for (const Call& c : calls) begin_call(c.op, CallStatus::kQueued, c.bytes);
}

void flight_reset_for_test() noexcept {
  for (Slot& slot : g_ring) {
    const SlotWrite write(slot);
    slot.seq.store(0, std::memory_order_relaxed);
  }
  g_entered.store(0, std::memory_order_release);
}

}  // namespace cnn
