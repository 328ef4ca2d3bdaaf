// Where the ranks of a training run write their flight recorder rings (flight_recorder.hpp), and what
// every rank knows of the others to read theirs: RUN_DIR/flight/rank-N.txt, the host of each rank, a
// name for this start of the job (a file left by an earlier start, before a resume, is not read as a
// record of this one), which ranks keep records, and when they write them.
//
// When a rank writes its ring:
//   - when its watchdog has seen no progress for half the smallest --stall-timeout of the job
//     (publish_after): once per such silence, and again should its newest collective change within
//     it. So when a rank stops, every rank still running has written which collective it waits in
//     before the first watchdog fires (after a whole timeout plus a grace). The record stays when the
//     rank moves on: a run that went on after a slow phase keeps it (`written` says when);
//   - when its watchdog fires (the record's `why` is the line it prints);
//   - when one of its collectives fails (the error).
// A stopped rank writes nothing: what it cannot fake is a record, written after it stopped, that shows
// it reached the collective the others wait in.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cnn/communicator.hpp"

namespace cnn {

struct FlightSite {
  std::string dir;                  // RUN_DIR/flight
  int rank = 0;
  int size = 1;
  std::string host;
  std::string run;                  // the same on every rank of this start, different for the next
  std::vector<std::string> hosts;   // by rank
  std::vector<char> keeps_record;   // by rank: its watchdog runs (--stall-timeout > 0) and it sees RUN_DIR
  double publish_after = 0.0;       // seconds without progress after which every rank writes its ring
};

// Collective (one MPI_Allgather). `stall_timeout`: this rank's --stall-timeout (0: no watchdog).
FlightSite set_up_flight_site(const MpiWorld& world, const std::string& run_dir, double stall_timeout);

// Where flight_failed writes, while it lives (the training loop's).
class FlightSiteInstall {
 public:
  explicit FlightSiteInstall(std::shared_ptr<const FlightSite> site);
  ~FlightSiteInstall();
  FlightSiteInstall(const FlightSiteInstall&) = delete;
  FlightSiteInstall& operator=(const FlightSiteInstall&) = delete;
};

// This rank's ring, with its header, as the file says it.
std::string flight_record_text(const FlightSite& site, const std::string& why);

// Writes this rank's ring to `site` now; returns "" or why it could not.
std::string write_flight_record(const FlightSite& site, const std::string& why);

// The same to the installed site, if any, on the calling thread (a failed collective). That record is
// final: the watchdog neither rewrites nor removes it (flight_record_is_final). Never throws.
void write_flight_record_now(const std::string& why) noexcept;
bool flight_record_is_final() noexcept;


}  // namespace cnn
