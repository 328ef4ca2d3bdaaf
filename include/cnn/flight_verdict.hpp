// Naming the ranks that stopped. When a watchdog fires while its rank waits for the others, the
// collective it waits in is its newest one (flight_entered()); every rank still running has written by
// then the newest collective it had started (flight_site.hpp). A rank whose record of this start of
// the job shows a smaller number, or that has no such record, has not reached the collective: its
// progress stopped before it (a rank stopped by SIGSTOP, a hung node, a dead process). Sequence
// numbers need no clock agreement between nodes, and a stopped rank cannot write a record after it
// stopped, so it cannot look as if it had arrived.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cnn/flight_site.hpp"

namespace cnn {

struct Arrivals {
  std::vector<int> not_reached;  // ranks that keep records and have none showing the collective reached
  std::vector<int> unknown;      // ranks that keep no records (FlightSite::keeps_record)
};

// entered[q]: the newest collective of rank q's record of this start, or none. `self` is left out.
Arrivals judge_arrivals(int self, std::uint64_t waited_in, const std::vector<std::optional<std::uint64_t>>& entered,
                        const std::vector<char>& keeps_record);

// Reads the other ranks' records from site.dir (one small read each) and judges them.
Arrivals read_arrivals(const FlightSite& site, std::uint64_t waited_in);

// For the one line: "rank 2 on node7 has not reached it", or "every rank has reached it, so ...".
std::string describe_arrivals(const Arrivals& arrivals, const std::vector<std::string>& hosts);

}  // namespace cnn
