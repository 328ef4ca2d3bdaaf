#include "cnn/flight_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "cnn/watchdog.hpp"

namespace cnn {

namespace {

// What a reader needs of the header before it trusts the file; the rest is for people.
constexpr std::size_t kHeaderReadBytes = 8192;

const char* phase_name(int phase) {
  if (phase < 0 || phase >= kWatchPhaseCount) return "?";
  return watch_phase_name(static_cast<WatchPhase>(phase));
}

// 1764169200.123456: UTC seconds since the Unix epoch, to the microsecond; comparable across ranks
// as far as the nodes' clocks agree (NTP: well under a millisecond).
std::string unix_seconds(std::int64_t ns) {
  char text[40];
  std::snprintf(text, sizeof(text), "%" PRId64 ".%06" PRId64, ns / 1000000000, ns % 1000000000 / 1000);
  return text;
}

// 2026-11-26T15:00:09.012345Z
std::string iso_utc(std::int64_t ns) {
  const std::time_t seconds = static_cast<std::time_t>(ns / 1000000000);
  std::tm utc{};
  char date[32] = "?";
  if (gmtime_r(&seconds, &utc) != nullptr) std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &utc);
  char text[48];
  std::snprintf(text, sizeof(text), "%s.%06dZ", date, static_cast<int>(ns % 1000000000 / 1000));
  return text;
}

// One line of text: a reason that spans lines would break the `# key: value` form.
std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  return text;
}

bool parse_u64(const std::string& text, std::uint64_t& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-') return false;
  out = v;
  return true;
}

bool parse_i64(const std::string& text, std::int64_t& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  out = v;
  return true;
}

}  // namespace

std::string format_flight_file(const FlightFileHeader& h, const std::vector<FlightEntry>& entries) {
  std::string out;
  out.reserve(1200 + entries.size() * 120);
  char line[512];
  out += kFlightTitle;
  out += "\n# rank: " + std::to_string(h.rank) + " of " + std::to_string(h.size) + "\n";
  out += "# host: " + one_line(h.host) + "\n";
  out += "# pid: " + std::to_string(h.pid) + "\n";
  out += "# run: " + one_line(h.run) + "\n";
  out += "# written: " + iso_utc(h.written_ns) + " (" + unix_seconds(h.written_ns) + ")\n";
  out += "# why: " + one_line(h.why) + "\n";
  out += "# entered: " + std::to_string(h.entered) + "\n";
  out += "# phase: " + one_line(h.phase) + "\n";
  out += "# global_step: " + std::to_string(h.step) + "\n";
  out += "# heartbeats: " + std::to_string(h.heartbeats) + "\n";
  out += "# columns: seq (the same number is the same call on every rank), op, bytes (this rank's buffer), "
         "step (global step), start and end (UTC seconds since the Unix epoch; end '-': not ended), "
         "ms (end - start, or until written if not ended), status (in-flight, done, failed, queued), "
         "phase (to the end of the line)\n";
  std::snprintf(line, sizeof(line), "#%8s  %-13s %12s %8s %17s %17s %11s  %-9s  %s\n", "seq", "op", "bytes", "step",
                "start", "end", "ms", "status", "phase");
  out += line;
  for (const FlightEntry& e : entries) {
    const bool ended = e.end_ns != 0;
    const std::int64_t until = ended ? e.end_ns : h.written_ns;
    const double ms = static_cast<double>(until - e.start_ns) * 1e-6;
    std::snprintf(line, sizeof(line), "%9" PRIu64 "  %-13s %12" PRId64 " %8" PRId64 " %17s %17s %11.3f  %-9s  %s\n",
                  e.seq, collective_op_name(e.op), e.bytes, e.step, unix_seconds(e.start_ns).c_str(),
                  ended ? unix_seconds(e.end_ns).c_str() : "-", ms, call_status_name(e.status), phase_name(e.phase));
    out += line;
  }
  return out;
}

std::optional<FlightFileHeader> parse_flight_header(const std::string& text) {
  if (text.compare(0, std::strlen(kFlightTitle), kFlightTitle) != 0) return std::nullopt;
  FlightFileHeader h;
  bool have_rank = false, have_run = false, have_entered = false, have_columns = false;
  std::size_t at = 0;
  while (at < text.size() && !have_columns) {
    const std::size_t end = text.find('\n', at);
    if (end == std::string::npos) break;  // a torn last line
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.compare(0, 2, "# ") != 0) break;
    const std::size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(2, colon - 2);
    const std::string value = line.substr(colon + 2);
    if (key == "rank") {
      int rank = -1, size = 0;
      have_rank = std::sscanf(value.c_str(), "%d of %d", &rank, &size) == 2 && rank >= 0 && size > rank;
      h.rank = rank;
      h.size = size;
    } else if (key == "host") {
      h.host = value;
    } else if (key == "pid") {
      std::int64_t pid = 0;
      if (parse_i64(value, pid)) h.pid = static_cast<long>(pid);
    } else if (key == "run") {
      h.run = value;
      have_run = !value.empty();
    } else if (key == "why") {
      h.why = value;
    } else if (key == "entered") {
      have_entered = parse_u64(value, h.entered);
    } else if (key == "phase") {
      h.phase = value;
    } else if (key == "global_step") {
      parse_i64(value, h.step);
    } else if (key == "columns") {
      have_columns = true;  // the last header line: what comes before it is whole
    }
  }
  if (!have_rank || !have_run || !have_entered || !have_columns) return std::nullopt;
  return h;
}

std::string flight_file_path(const std::string& dir, int rank) { return dir + "/rank-" + std::to_string(rank) + ".txt"; }

std::string write_flight_file(const std::string& dir, int rank, const std::string& text) {
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) return dir + ": cannot create: " + std::strerror(errno);
  const std::string path = flight_file_path(dir, rank);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return tmp + ": cannot create: " + std::strerror(errno);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return tmp + ": cannot write: " + std::strerror(err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) return tmp + ": cannot close: " + std::strerror(errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return path + ": cannot rename " + tmp + " over it: " + std::strerror(errno);
  return "";
}

std::optional<FlightFileHeader> read_flight_header(const std::string& dir, int rank) {
  const int fd = ::open(flight_file_path(dir, rank).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text(kHeaderReadBytes, '\0');
  std::size_t have = 0;
  while (have < text.size()) {
    const ssize_t n = ::read(fd, text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<std::size_t>(n);
  }
  ::close(fd);
  text.resize(have);
  return parse_flight_header(text);
}

}  // namespace cnn
