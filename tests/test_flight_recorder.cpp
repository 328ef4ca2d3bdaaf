// The flight recorder (include/cnn/flight_recorder.hpp, flight_file.hpp, flight_verdict.hpp): the ring
// keeps the newest 64 calls in order, with their ends and failures; a graph's captured collectives
// count at its replays, not at the capture; the file's header reads back and a torn or foreign file is
// no record; the verdict names the ranks whose record does not show the collective reached; the
// watchdog writes its rank's record once per silence of the site's length, and a failed collective
// writes a final one. (Naming a stopped rank end to end: tests/flight_recorder_test.sh.)
#define BOOST_TEST_MODULE flight_recorder
#include "boost_test.hpp"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "cnn/flight_file.hpp"
#include "cnn/flight_recorder.hpp"
#include "cnn/flight_site.hpp"
#include "cnn/flight_verdict.hpp"
#include "cnn/watchdog.hpp"
#include "test_files.hpp"

using namespace cnn;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> data_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  return lines;
}

std::shared_ptr<FlightSite> site_in(const std::string& run_dir, int rank, int size) {
  auto site = std::make_shared<FlightSite>();
  site->dir = run_dir + "/flight";
  site->rank = rank;
  site->size = size;
  site->host = "host" + std::to_string(rank);
  site->run = "run A";
  for (int q = 0; q < size; ++q) {
    site->hosts.push_back("host" + std::to_string(q));
    site->keeps_record.push_back(1);
  }
  site->publish_after = 0.1;
  return site;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Waits up to `seconds` for `condition`.
template <class F>
bool eventually(F condition, double seconds = 5.0) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_ring_keeps_the_newest_64_calls_in_order) {
  flight_reset_for_test();
  heartbeat_step(7);
  heartbeat(WatchPhase::kAllreduce);
  for (int i = 1; i <= 100; ++i) {
    const std::uint64_t seq = flight_begin(CollectiveOp::kAllreduce, i);
    BOOST_TEST(seq == static_cast<std::uint64_t>(i));
    flight_end(seq);
  }
  const std::uint64_t open = flight_begin(CollectiveOp::kBroadcast, 12);
  heartbeat(WatchPhase::kIdle);
  const std::vector<FlightEntry> ring = flight_snapshot();
  BOOST_TEST(ring.size() == static_cast<std::size_t>(kFlightRingSize));
  BOOST_TEST(ring.front().seq == 101u - kFlightRingSize + 1);
  BOOST_TEST(ring.back().seq == open);
  BOOST_TEST(flight_entered() == open);
  for (std::size_t i = 1; i < ring.size(); ++i) BOOST_TEST(ring[i].seq == ring[i - 1].seq + 1);
  const FlightEntry& last_done = ring[ring.size() - 2];
  BOOST_TEST(last_done.bytes == 100);
  BOOST_TEST((last_done.status == CallStatus::kDone));
  BOOST_TEST(last_done.end_ns >= last_done.start_ns);
  BOOST_TEST(last_done.step == 7);
  BOOST_TEST(last_done.phase == static_cast<int>(WatchPhase::kAllreduce));
  BOOST_TEST((ring.back().status == CallStatus::kInFlight));
  BOOST_TEST(ring.back().end_ns == 0);
  BOOST_TEST((ring.back().op == CollectiveOp::kBroadcast));
  // The end of a call whose slot 64 newer calls took is dropped, not written over the newer call.
  for (int i = 0; i < kFlightRingSize; ++i) flight_end(flight_begin(CollectiveOp::kBarrier, 0));
  flight_end(open, CallStatus::kFailed);
  for (const FlightEntry& e : flight_snapshot()) BOOST_TEST((e.status == CallStatus::kDone));
}

BOOST_AUTO_TEST_CASE(a_failed_call_is_marked_and_the_error_passes_on) {
  flight_reset_for_test();
  BOOST_CHECK_THROW(recorded_collective(CollectiveOp::kAllreduce, 4, [] { throw std::runtime_error("MPI_ERR_OTHER"); }),
                    std::runtime_error);
  recorded_collective(CollectiveOp::kBarrier, 0, [] {});
  const std::vector<FlightEntry> ring = flight_snapshot();
  BOOST_TEST(ring.size() == 2u);
  BOOST_TEST((ring[0].status == CallStatus::kFailed));
  BOOST_TEST(ring[0].end_ns != 0);
  BOOST_TEST((ring[1].status == CallStatus::kDone));
}

BOOST_AUTO_TEST_CASE(a_captured_graph_records_its_collectives_at_each_replay) {
  // An eager step records its bucket allreduces as it queues them; the same step captured in a graph
  // must record the same calls at each replay and none at the capture, so the numbers stay aligned
  // with a rank that ran the step eagerly.
  flight_reset_for_test();
  flight_record_queued(CollectiveOp::kDeviceAllreduce, 400);  // the eager step
  flight_record_queued(CollectiveOp::kDeviceAllreduce, 800);
  std::vector<FlightCaptureTally::Call> captured;
  {
    FlightCaptureTally tally;
    BOOST_TEST(flight_record_queued(CollectiveOp::kDeviceAllreduce, 400) == 0u);
    BOOST_TEST(flight_record_queued(CollectiveOp::kDeviceAllreduce, 800) == 0u);
    captured = tally.take();
  }
  BOOST_TEST(flight_entered() == 2u);
  FlightCaptureTally::record_replay(captured);
  FlightCaptureTally::record_replay(captured);
  const std::vector<FlightEntry> ring = flight_snapshot();
  BOOST_TEST(ring.size() == 6u);
  for (std::size_t i = 0; i < ring.size(); ++i) {
    BOOST_TEST(ring[i].bytes == (i % 2 == 0 ? 400 : 800));
    BOOST_TEST((ring[i].status == CallStatus::kQueued));
    BOOST_TEST((ring[i].op == CollectiveOp::kDeviceAllreduce));
  }
}

BOOST_AUTO_TEST_CASE(the_file_has_a_header_that_reads_back_and_one_line_per_call) {
  flight_reset_for_test();
  for (int i = 0; i < 3; ++i) flight_end(flight_begin(CollectiveOp::kAllreduce, 16));
  flight_begin(CollectiveOp::kIallreduce, 54440);
  FlightFileHeader h;
  h.rank = 2;
  h.size = 4;
  h.host = "node7";
  h.pid = 4242;
  h.run = "rank 0 pid 1 on node1, 1795706483.069608";
  h.written_ns = 1795706490408656000;
  h.why = "a reason\nthat spans lines";
  h.entered = 4;
  h.phase = "step-end agreement";
  h.step = 9;
  const std::string text = format_flight_file(h, flight_snapshot());
  const std::optional<FlightFileHeader> back = parse_flight_header(text);
  BOOST_REQUIRE(back.has_value());
  BOOST_TEST(back->rank == 2);
  BOOST_TEST(back->size == 4);
  BOOST_TEST(back->host == "node7");
  BOOST_TEST(back->pid == 4242);
  BOOST_TEST(back->run == h.run);
  BOOST_TEST(back->entered == 4u);
  BOOST_TEST(back->phase == "step-end agreement");
  BOOST_TEST(back->step == 9);
  BOOST_TEST(back->why == "a reason that spans lines");
  BOOST_TEST(text.find("# written: 2026-11-26T15:21:30.408656Z (1795706490.408656)") != std::string::npos);
  const std::vector<std::string> lines = data_lines(text);
  BOOST_REQUIRE(lines.size() == 4u);
  // seq op bytes step start end ms status phase...
  std::istringstream last(lines.back());
  std::string seq, op, bytes, step, start, end, ms, status, phase;
  last >> seq >> op >> bytes >> step >> start >> end >> ms >> status;
  std::getline(last >> std::ws, phase);
  BOOST_TEST(seq == "4");
  BOOST_TEST(op == "iallreduce");
  BOOST_TEST(bytes == "54440");
  BOOST_TEST(end == "-");
  BOOST_TEST(status == "in-flight");
  BOOST_TEST(phase == "idle");
  // Torn (cut inside the header) or foreign text is no record.
  BOOST_TEST(!parse_flight_header(text.substr(0, text.find("# columns"))).has_value());
  BOOST_TEST(!parse_flight_header(text.substr(0, text.find("# entered") + 12)).has_value());
  BOOST_TEST(!parse_flight_header("epoch,train_loss\n1,0.5\n").has_value());
  BOOST_TEST(!parse_flight_header("").has_value());
}

BOOST_AUTO_TEST_CASE(the_verdict_names_the_ranks_whose_record_does_not_show_the_collective_reached) {
  const std::vector<char> all(4, 1);
  // Rank 0 waits in #345; rank 2 shows #344, rank 3 #345, rank 1 is ahead (a broadcast's root).
  Arrivals a = judge_arrivals(0, 345, {std::nullopt, 346u, 344u, 345u}, all);
  BOOST_TEST(a.not_reached == std::vector<int>{2});
  BOOST_TEST(a.unknown.empty());
  // No record at all (a rank stopped before it had been silent long enough to write): not reached.
  a = judge_arrivals(1, 345, {345u, std::nullopt, std::nullopt, 345u}, all);
  BOOST_TEST(a.not_reached == std::vector<int>{2});
  // A rank that keeps no records is unknown, not accused.
  a = judge_arrivals(0, 345, {std::nullopt, 345u, std::nullopt, 345u}, {1, 1, 0, 1});
  BOOST_TEST(a.not_reached.empty());
  BOOST_TEST(a.unknown == std::vector<int>{2});
  const std::vector<std::string> hosts = {"n0", "n1", "n2", "n3"};
  BOOST_TEST(describe_arrivals(judge_arrivals(0, 345, {std::nullopt, 344u, 344u, 345u}, all), hosts) ==
             "ranks 1 on n1, 2 on n2 have not reached it");
  BOOST_TEST(describe_arrivals(judge_arrivals(0, 345, {std::nullopt, 345u, 345u, 345u}, all), hosts).find(
                 "every rank has reached it") == 0u);
  BOOST_TEST(describe_arrivals(a, hosts) ==
             "every rank that keeps a flight record has reached it (rank 2 on n2 keeps no flight record: "
             "--stall-timeout 0 there, or RUN_DIR not visible on its node)");
}

BOOST_AUTO_TEST_CASE(records_are_read_from_the_files_and_other_starts_do_not_count) {
  test::TempDir run_dir;
  flight_reset_for_test();
  for (int i = 0; i < 10; ++i) flight_begin(CollectiveOp::kAllreduce, 4);
  // Rank 1 reached #10, rank 2 only #9, rank 3's file is from an earlier start (a resume) and rank 4's
  // is torn; rank 5 wrote nothing.
  const auto write_as = [&](int rank, std::uint64_t entered, const std::string& run) {
    FlightFileHeader h;
    h.rank = rank;
    h.size = 6;
    h.run = run;
    h.entered = entered;
    const std::string text = format_flight_file(h, flight_snapshot());
    BOOST_TEST(write_flight_file(run_dir.path + "/flight", rank, text) == "");
    return text;
  };
  write_as(1, 10, "run A");
  write_as(2, 9, "run A");
  write_as(3, 10, "run before the resume");
  const std::string torn = write_as(4, 10, "run A");
  BOOST_TEST(write_flight_file(run_dir.path + "/flight", 4, torn.substr(0, torn.find("# phase"))) == "");
  const auto site = site_in(run_dir.path, 0, 6);
  const Arrivals a = read_arrivals(*site, 10);
  BOOST_TEST(a.not_reached == (std::vector<int>{2, 3, 4, 5}));
  BOOST_TEST(!exists(flight_file_path(site->dir, 1) + ".tmp"));  // renamed into place
}

BOOST_AUTO_TEST_CASE(the_watchdog_writes_the_record_of_a_silent_rank_once_per_silence) {
  test::TempDir run_dir;
  flight_reset_for_test();
  const auto site = site_in(run_dir.path, 3, 4);  // writes after 0.1 s of silence
  const std::string file = flight_file_path(site->dir, 3);
  const auto entered_on_file = [&]() -> std::uint64_t {
    const std::optional<FlightFileHeader> h = read_flight_header(site->dir, 3);
    return h ? h->entered : 0;
  };
  {
    Watchdog watchdog(5.0, 3, "host3", std::nullopt, site);  // fires only after 5 s: never here
    heartbeat(WatchPhase::kAllreduce);
    const std::uint64_t first = flight_begin(CollectiveOp::kAllreduce, 54440);
    BOOST_TEST(eventually([&] { return entered_on_file() == first; }));
    const std::optional<FlightFileHeader> h = read_flight_header(site->dir, 3);
    BOOST_REQUIRE(h.has_value());
    BOOST_TEST(h->run == "run A");
    BOOST_TEST(h->phase == "allreduce");
    BOOST_TEST(h->why.find("no progress for") == 0u);
    BOOST_TEST(data_lines(read_text(file)).back().find("in-flight") != std::string::npos);
    const std::string written = read_text(file);
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // two more looks, the same silence
    BOOST_TEST(read_text(file) == written);
    // The rank moves on: the record stays; the next silence, in a newer collective, rewrites it.
    flight_end(first);
    heartbeat(WatchPhase::kUpdate);
    heartbeat(WatchPhase::kStepEnd);
    const std::uint64_t second = flight_begin(CollectiveOp::kAllreduce, 4);
    BOOST_TEST(exists(file));
    BOOST_TEST(eventually([&] { return entered_on_file() == second; }));
    heartbeat(WatchPhase::kIdle);
  }
  BOOST_TEST(exists(file));
}

BOOST_AUTO_TEST_CASE(a_failed_collective_writes_a_final_record_to_the_installed_site) {
  test::TempDir run_dir;
  flight_reset_for_test();
  const auto site = site_in(run_dir.path, 1, 2);
  {
    const FlightSiteInstall install(site);
    BOOST_CHECK_THROW(recorded_collective(CollectiveOp::kAllreduce, 8, [] { throw std::runtime_error("peer gone"); }),
                      std::runtime_error);
  }
  const std::string text = read_text(flight_file_path(site->dir, 1));
  const std::optional<FlightFileHeader> h = parse_flight_header(text);
  BOOST_REQUIRE(h.has_value());
  BOOST_TEST(h->why == "collective #1 failed: peer gone");
  BOOST_TEST(data_lines(text).back().find("failed") != std::string::npos);
  BOOST_TEST(flight_record_is_final());
  // Without an installed site nothing is written (set-up collectives, eval, predict).
  test::TempDir other;
  BOOST_CHECK_THROW(recorded_collective(CollectiveOp::kAllreduce, 8, [] { throw std::runtime_error("x"); }),
                    std::runtime_error);
  BOOST_TEST(!exists(other.path + "/flight"));
}
