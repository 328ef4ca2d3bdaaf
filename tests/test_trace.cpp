// The trace recorder: the --trace-steps window, the event cap, the layout of a step's phases, and
// the Chrome trace JSON (names, ph "X", pid per rank, process_name metadata). The script test
// trace_test.sh checks a real run's file with a JSON parser.
#define BOOST_TEST_MODULE trace
#include <sstream>

#include "boost_test.hpp"
#include "cnn/errors.hpp"
#include "cnn/trace.hpp"

using cnn::Phase;

BOOST_AUTO_TEST_CASE(window_parses_and_rejects_bad_values) {
  const cnn::TraceWindow w = cnn::parse_trace_window("3:7");
  BOOST_TEST(w.first == 3);
  BOOST_TEST(w.last == 7);
  const cnn::TraceWindow d = cnn::parse_trace_window(cnn::kDefaultTraceSteps);
  BOOST_TEST(d.first == 10);
  BOOST_TEST(d.last == 20);
  for (const char* bad : {"", "5", "7:3", "3:3", "-1:4", "a:4", "3:4x", "3:"})
    BOOST_CHECK_THROW(cnn::parse_trace_window(bad), cnn::UsageError);
}

BOOST_AUTO_TEST_CASE(records_only_inside_the_window) {
  cnn::TraceRecorder rec({2, 4}, 100.0);
  for (std::int64_t step = 0; step < 10; ++step) rec.record(step, cnn::kTraceStepName, 100.0 + step, 0.5);
  BOOST_TEST(rec.events().size() == 2u);
  BOOST_TEST(rec.events()[0].step == 2);
  BOOST_TEST(rec.events()[1].step == 3);
  BOOST_TEST(rec.events()[0].start_us == 2e6);  // relative to the origin, in microseconds
  BOOST_TEST(rec.events()[0].dur_us == 0.5e6);
  BOOST_TEST(!rec.window_done(3));
  BOOST_TEST(rec.window_done(4));
}

BOOST_AUTO_TEST_CASE(caps_events_and_counts_the_rest) {
  cnn::TraceRecorder rec({0, 1000}, 0.0, 5);
  for (std::int64_t step = 0; step < 100; ++step) rec.record(step, static_cast<int>(Phase::kForward), 0.0, 1.0);
  BOOST_TEST(rec.events().size() == 5u);
  BOOST_TEST(rec.dropped() == 95u);
}

BOOST_AUTO_TEST_CASE(step_phases_are_laid_end_to_end_inside_the_step) {
  cnn::TraceRecorder rec({0, 1}, 0.0);
  cnn::PhaseTimes t;
  t.add(Phase::kData, 0.1);
  t.add(Phase::kForward, 0.2);
  t.add(Phase::kBackward, 0.3);
  t.add(Phase::kUpdate, 0.05);
  t.add(Phase::kEval, 9.0);  // not a step phase: left out
  rec.record_step(0, 1.0, 0.7, t);
  const auto& e = rec.events();
  BOOST_TEST_REQUIRE(e.size() == 5u);  // step + 4 non-zero phases (no h2d, no allreduce)
  BOOST_TEST(std::string(cnn::trace_event_name(e[0].name)) == "step");
  BOOST_TEST(std::string(cnn::trace_event_name(e[1].name)) == "data");
  BOOST_TEST(std::string(cnn::trace_event_name(e[4].name)) == "update");
  BOOST_TEST(e[2].start_us == e[1].start_us + e[1].dur_us, boost::test_tools::tolerance(1e-6));
  const double phases_end = e[4].start_us + e[4].dur_us;
  BOOST_TEST(phases_end <= e[0].start_us + e[0].dur_us + 1e-6);
}

BOOST_AUTO_TEST_CASE(json_names_every_rank_and_escapes_hosts) {
  std::vector<cnn::RankTrace> ranks(2);
  ranks[0].host = "node\"1";
  ranks[1].host = "node2";
  cnn::TraceEvent e;
  e.name = static_cast<int>(Phase::kAllreduce);
  e.start_us = 12.5;
  e.dur_us = 3.0;
  ranks[1].events.push_back(e);
  std::ostringstream out;
  cnn::write_chrome_trace(out, ranks, {0, 1});
  const std::string json = out.str();
  BOOST_TEST(json.find("\"traceEvents\"") != std::string::npos);
  BOOST_TEST(json.find("\"name\":\"rank 0 (node\\\"1)\"") != std::string::npos);
  BOOST_TEST(json.find("\"name\":\"rank 1 (node2)\"") != std::string::npos);
  BOOST_TEST(json.find("\"name\":\"allreduce\",\"cat\":\"phase\",\"ph\":\"X\",\"pid\":1") != std::string::npos);
  BOOST_TEST(json.find("\"ts\":12.500,\"dur\":3.000") != std::string::npos);
}
