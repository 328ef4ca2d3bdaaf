// The flight recorder's file I/O for the watchdog, on a thread of its own. A file system that hangs is
// one of the stalls the watchdog is there to end, so the watchdog's thread never waits on a file:
// it asks, and waits for an answer only as long as it can afford before its abort.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cnn/flight_site.hpp"
#include "cnn/flight_verdict.hpp"

namespace cnn {

class FlightWriter {
 public:
  explicit FlightWriter(std::shared_ptr<const FlightSite> site);
  // Finishes the requests made so far if that takes under a few seconds; otherwise leaves the thread
  // behind, blocked in its file system (it owns what it uses).
  ~FlightWriter();
  FlightWriter(const FlightWriter&) = delete;
  FlightWriter& operator=(const FlightWriter&) = delete;

  // Writes this rank's record (flight_site.hpp); returns at once. The newest of the requests not yet
  // carried out replaces the older ones.
  void publish(const std::string& why);
  // Writes this rank's record and waits at most `seconds` for it; false if it was not written by then.
  bool publish_and_wait(const std::string& why, double seconds);
  // Reads the other ranks' records (read_arrivals); nullopt if that took more than `seconds`.
  std::optional<Arrivals> arrivals(std::uint64_t waited_in, double seconds);

  struct State;  // shared with the thread

 private:
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace cnn
