#include "cnn/trace.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "cnn/communicator.hpp"
#include "cnn/errors.hpp"
#include "cnn/flight_recorder.hpp"
#include "cnn/mpi_check.hpp"
#include "io/fsync_util.hpp"

namespace cnn {

namespace {

constexpr double kMicrosecondsPerSecond = 1e6;
constexpr int kRoot = 0;
// The one track of each rank: phases nest inside their step on it.
constexpr int kStepTrack = 0;
// The phases of a step in the order they run, so that laying them end to end reads like the step.
constexpr std::array<Phase, 6> kStepPhases = {Phase::kData,     Phase::kH2D,      Phase::kForward,
                                              Phase::kBackward, Phase::kAllreduce, Phase::kUpdate};

bool parse_int(const std::string& text, std::int64_t& value) {
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, value);
  return !text.empty() && result.ec == std::errc() && result.ptr == end;
}

// JSON string body: host names are the only free text.
std::string json_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof(code), "\\u%04x", static_cast<unsigned>(c));
      out += code;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

TraceWindow parse_trace_window(const std::string& text) {
  const std::size_t colon = text.find(':');
  TraceWindow w;
  if (colon == std::string::npos || !parse_int(text.substr(0, colon), w.first) ||
      !parse_int(text.substr(colon + 1), w.last) || w.first < 0 || w.last <= w.first)
    throw UsageError("--trace-steps " + text + ": expected A:B with 0 <= A < B (global steps, B excluded)");
  return w;
}

const char* trace_event_name(int name_id) {
  return name_id == kTraceStepName ? "step" : phase_name(static_cast<Phase>(name_id));
}

TraceRecorder::TraceRecorder(TraceWindow window, double origin_seconds, std::size_t max_events)
    : window_(window), origin_(origin_seconds), max_events_(max_events) {
  // Reserving up front keeps reallocation out of the timed steps.
  const auto per_step = static_cast<std::size_t>(kStepPhases.size() + 1);
  const auto steps = static_cast<std::size_t>(window.last - window.first);
  events_.reserve(std::min(max_events_, steps * per_step));
}

void TraceRecorder::record(std::int64_t global_step, int name_id, double start_seconds, double duration_seconds) {
  if (!recording(global_step)) return;
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  TraceEvent e;
  e.step = global_step;
  e.name = name_id;
  e.start_us = (start_seconds - origin_) * kMicrosecondsPerSecond;
  e.dur_us = duration_seconds * kMicrosecondsPerSecond;
  events_.push_back(e);
}

void TraceRecorder::record_step(std::int64_t global_step, double start_seconds, double wall_seconds_of_step,
                                const PhaseTimes& phases) {
  if (!recording(global_step)) return;
  record(global_step, kTraceStepName, start_seconds, wall_seconds_of_step);
  double at = start_seconds;
  for (const Phase p : kStepPhases) {
    const double s = phases.get(p);
    if (s <= 0.0) continue;  // e.g. h2d on the CPU backends, allreduce on one rank
    record(global_step, static_cast<int>(p), at, s);
    at += s;
  }
}

void TraceRecorder::gather_and_write(const MpiWorld& world, const std::string& path) {
  if (written_) return;
  written_ = true;
  const int ranks = world.size();
  const bool root = world.rank() == kRoot;

  // Byte counts first, then the events as raw bytes (TraceEvent is plain data, same on every rank).
  const int my_bytes = static_cast<int>(events_.size() * sizeof(TraceEvent));
  std::vector<int> bytes(root ? static_cast<std::size_t>(ranks) : 0);
  recorded_collective(CollectiveOp::kGather, sizeof(int), [&] {
    CNN_CHECK_MPI(MPI_Gather(&my_bytes, 1, MPI_INT, bytes.data(), 1, MPI_INT, kRoot, world.comm()));
  });
  std::vector<int> offsets(bytes.size());
  int total = 0;
  for (std::size_t r = 0; r < bytes.size(); ++r) {
    offsets[r] = total;
    total += bytes[r];
  }
  std::vector<TraceEvent> all(root ? static_cast<std::size_t>(total) / sizeof(TraceEvent) : 0);
  recorded_collective(CollectiveOp::kGatherv, my_bytes, [&] {
    CNN_CHECK_MPI(MPI_Gatherv(events_.data(), my_bytes, MPI_BYTE, all.data(), bytes.data(), offsets.data(), MPI_BYTE,
                              kRoot, world.comm()));
  });

  std::array<char, MPI_MAX_PROCESSOR_NAME> my_host{};
  std::strncpy(my_host.data(), world.host().c_str(), my_host.size() - 1);
  std::vector<char> hosts(root ? my_host.size() * static_cast<std::size_t>(ranks) : 0);
  recorded_collective(CollectiveOp::kGather, static_cast<std::int64_t>(my_host.size()), [&] {
    CNN_CHECK_MPI(MPI_Gather(my_host.data(), static_cast<int>(my_host.size()), MPI_CHAR, hosts.data(),
                             static_cast<int>(my_host.size()), MPI_CHAR, kRoot, world.comm()));
  });
  const auto my_dropped = static_cast<std::int64_t>(dropped_);
  std::vector<std::int64_t> dropped(root ? static_cast<std::size_t>(ranks) : 0);
  recorded_collective(CollectiveOp::kGather, sizeof(std::int64_t), [&] {
    CNN_CHECK_MPI(MPI_Gather(&my_dropped, 1, MPI_INT64_T, dropped.data(), 1, MPI_INT64_T, kRoot, world.comm()));
  });
  events_.clear();
  events_.shrink_to_fit();
  if (!root) return;

  std::vector<RankTrace> per_rank(static_cast<std::size_t>(ranks));
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    per_rank[r].host = std::string(hosts.data() + r * my_host.size());
    per_rank[r].dropped = static_cast<std::size_t>(dropped[r]);
    const TraceEvent* first = all.data() + static_cast<std::size_t>(offsets[r]) / sizeof(TraceEvent);
    per_rank[r].events.assign(first, first + static_cast<std::size_t>(bytes[r]) / sizeof(TraceEvent));
  }
  // Checked not to exist at start-up (check_trace_target); created exclusively, never overwritten.
  std::ostringstream text;
  write_chrome_trace(text, per_rank, window_);
  fsutil::write_new_file(path, text.str());
}

void write_chrome_trace(std::ostream& out, const std::vector<RankTrace>& ranks, const TraceWindow& window) {
  std::size_t dropped = 0;
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto separator = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    dropped += ranks[r].dropped;
    separator();
    out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << r << ",\"tid\":" << kStepTrack
        << ",\"args\":{\"name\":\"rank " << r << " (" << json_escape(ranks[r].host) << ")\"}}";
    separator();
    out << "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" << r << ",\"tid\":" << kStepTrack
        << ",\"args\":{\"sort_index\":" << r << "}}";
    separator();
    out << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << r << ",\"tid\":" << kStepTrack
        << ",\"args\":{\"name\":\"steps\"}}";
  }
  // Microseconds with 3 decimals: nanosecond resolution, as the format allows fractional ts.
  out << std::fixed << std::setprecision(3);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    for (const TraceEvent& e : ranks[r].events) {
      separator();
      out << "{\"name\":\"" << trace_event_name(e.name) << "\",\"cat\":\""
          << (e.name == kTraceStepName ? "step" : "phase") << "\",\"ph\":\"X\",\"pid\":" << r
          << ",\"tid\":" << kStepTrack << ",\"ts\":" << e.start_us << ",\"dur\":" << e.dur_us
          << ",\"args\":{\"step\":" << e.step << "}}";
    }
  }
  out << "\n],\"otherData\":{\"trace_steps\":\"" << window.first << ':' << window.last
      << "\",\"ranks\":" << ranks.size() << ",\"dropped_events\":" << dropped << "}}\n";
}

}  // namespace cnn
