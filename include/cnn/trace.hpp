// A Chrome trace (the JSON "traceEvents" format that Perfetto and chrome://tracing open) of a bounded
// window of global steps, for every rank. Each rank records only inside the window and at most
// kMaxTraceEventsPerRank events, so the file's size does not grow with the run's length. At the end
// of the window (or of the run) the events are gathered to rank 0, which writes the file.
//
// Layout: pid = rank (named "rank R (host)"), one track (tid 0) per rank. Each step is an X event
// "step" spanning its measured wall time; inside it the phases (data, h2d, forward, backward,
// allreduce, update) are laid end to end in execution order with their measured durations. (With
// micro-batching the CPU backends interleave data/forward/backward; the trace shows their sums.)
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cnn/phase_times.hpp"

namespace cnn {

class MpiWorld;

// Global steps [first, last) (0-based: the step that is run as the (first+1)-th of the run).
struct TraceWindow {
  std::int64_t first = 10;
  std::int64_t last = 20;
};

// The default of --trace-steps.
inline constexpr const char* kDefaultTraceSteps = "10:20";

// Enough for a window of a few thousand steps (8 events each); bounds a rank's memory and the file.
inline constexpr std::size_t kMaxTraceEventsPerRank = 50000;

// Parses "A:B" (A < B, both >= 0). Throws UsageError naming the option.
TraceWindow parse_trace_window(const std::string& text);

// Event name ids: the phases, then the whole step.
inline constexpr int kTraceStepName = kPhaseCount;
const char* trace_event_name(int name_id);

// Plain data, so that it can be gathered with MPI as bytes.
struct TraceEvent {
  std::int64_t step = 0;  // global step (0-based) it belongs to
  std::int32_t name = 0;  // a Phase, or kTraceStepName
  std::int32_t pad = 0;
  double start_us = 0.0;  // since the recorder's origin
  double dur_us = 0.0;
};

// One rank's recorder. Not collective; gather_and_write() is.
class TraceRecorder {
 public:
  // origin_seconds: wall_seconds() taken right after a barrier, so that all ranks' time axes line up
  // (within the barrier's skew) even across hosts whose steady clocks differ.
  TraceRecorder(TraceWindow window, double origin_seconds, std::size_t max_events = kMaxTraceEventsPerRank);

  bool recording(std::int64_t global_step) const {
    return !written_ && global_step >= window_.first && global_step < window_.last;
  }
  // True once every step of the window has run (all ranks reach this at the same step).
  bool window_done(std::int64_t steps_completed) const { return !written_ && steps_completed >= window_.last; }

  // One span; ignored outside the window or beyond the cap (counted in dropped()).
  void record(std::int64_t global_step, int name_id, double start_seconds, double duration_seconds);
  // A step of measured wall time, with the phases it spent laid end to end from its start.
  void record_step(std::int64_t global_step, double start_seconds, double wall_seconds_of_step,
                   const PhaseTimes& phases);

  const std::vector<TraceEvent>& events() const { return events_; }
  std::size_t dropped() const { return dropped_; }
  const TraceWindow& window() const { return window_; }

  // Collective: gathers every rank's events and host to rank 0, which writes `path`. Once only; later
  // calls do nothing. Throws IoError on rank 0 when the file cannot be written.
  void gather_and_write(const MpiWorld& world, const std::string& path);

 private:
  TraceWindow window_;
  double origin_ = 0.0;
  std::size_t max_events_;
  std::vector<TraceEvent> events_;
  std::size_t dropped_ = 0;
  bool written_ = false;
};

// What rank 0 writes: events and host of every rank. Separate from MPI so tests can check the JSON.
struct RankTrace {
  std::string host;
  std::vector<TraceEvent> events;
  std::size_t dropped = 0;
};
void write_chrome_trace(std::ostream& out, const std::vector<RankTrace>& ranks, const TraceWindow& window);

}  // namespace cnn
