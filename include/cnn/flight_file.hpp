// The file form of a rank's flight recorder ring, RUN_DIR/flight/rank-N.txt: a header of `# key: value`
// lines (who wrote it, when, why, and where the rank was), a line naming the columns, then one line
// per collective call, oldest first (docs/RELIABILITY.md, "Flight recorder", shows one):
//
//   # cnn_mpi flight recorder: the last collective calls of one rank, oldest first
//   # rank: 2 of 4
//   ...
//   #      seq  op                  bytes     step             start               end          ms  status     phase
//          341  allreduce           25640       22 1764169200.123456 1764169200.124001       0.545  done       allreduce
//
// The other ranks' watchdogs read the header back (read_flight_header) to learn which collective
// each rank had reached.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cnn/flight_recorder.hpp"

namespace cnn {

inline constexpr const char* kFlightTitle =
    "# cnn_mpi flight recorder: the last collective calls of one rank, oldest first";

// The header: what format_flight_file writes and read_flight_header reads back.
struct FlightFileHeader {
  int rank = -1;
  int size = 0;
  std::string host;
  long pid = 0;
  std::string run;              // names the start of the job that wrote it (flight_site.hpp)
  std::int64_t written_ns = 0;  // UTC, ns since the Unix epoch (not read back)
  std::string why;              // the reason for writing, one line
  std::uint64_t entered = 0;    // the newest collective this rank had started
  std::string phase;            // the watchdog phase it was in (watchdog.hpp's names)
  std::int64_t step = 0;        // the global step it was on
  std::uint64_t heartbeats = 0; // its heartbeat count (not read back)
};

// The whole file's text.
std::string format_flight_file(const FlightFileHeader& header, const std::vector<FlightEntry>& entries);

// The header of a file's text; nullopt when it is not a complete flight file header (a torn or
// foreign file counts as no record).
std::optional<FlightFileHeader> parse_flight_header(const std::string& text);

// dir/rank-N.txt
std::string flight_file_path(const std::string& dir, int rank);

// Writes `text` as dir/rank-N.txt (a .tmp renamed over it, so a reader sees the old file or the new
// one, whole), creating dir. Returns "" or why it failed. No fsync: a record is for the ranks and
// users of this job, not for a power cut.
std::string write_flight_file(const std::string& dir, int rank, const std::string& text);

// Reads the header of dir/rank-N.txt; nullopt when absent or malformed.
std::optional<FlightFileHeader> read_flight_header(const std::string& dir, int rank);

}  // namespace cnn
