// The stall watchdog's verdicts (include/cnn/watchdog.hpp): own-work phases fire after the timeout;
// phases that wait for peers get a grace margin, so the stalled rank reports first; a pending stop
// signal shortens a wait; idle and a timeout of 0 never fire. (The end-to-end abort, with the right
// rank named, is tested in fault_test.sh.)
#define BOOST_TEST_MODULE watchdog
#include "boost_test.hpp"

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "cnn/watchdog.hpp"

using cnn::judge_stall;
using cnn::WatchPhase;

BOOST_AUTO_TEST_CASE(own_work_fires_after_the_timeout) {
  BOOST_TEST(!judge_stall(WatchPhase::kForwardBackward, 9.9, 10, 0).fire);
  BOOST_TEST(judge_stall(WatchPhase::kForwardBackward, 10.1, 10, 0).fire);
  BOOST_TEST(judge_stall(WatchPhase::kCheckpoint, 10.1, 10, 0).fire);
  BOOST_TEST(judge_stall(WatchPhase::kData, 10.1, 10, 0).fire);
}

// A chunk of whole steps in one backend call (--steps-per-launch) beats once per step as its steps
// complete (StepChunk::on_progress), so one timeout of silence is a stall, as in the one-step loop.
// On 2+ ranks every step of the chunk waits for the others inside the call (the exchange): a waiting
// phase, whose grace lets the stalled rank report first and whose stop signal ends the wait.
BOOST_AUTO_TEST_CASE(a_chunk_of_steps_gets_the_one_step_loops_timeout) {
  BOOST_TEST(!cnn::waits_for_peers(WatchPhase::kStepChunk));
  BOOST_TEST(!judge_stall(WatchPhase::kStepChunk, 9.9, 10, 0).fire);
  BOOST_TEST(judge_stall(WatchPhase::kStepChunk, 10.1, 10, 0).fire);
  BOOST_TEST(cnn::waits_for_peers(WatchPhase::kStepChunkExchange));
  BOOST_TEST(!judge_stall(WatchPhase::kStepChunkExchange, 10.1, 10, 0).fire);  // the grace
  BOOST_TEST(judge_stall(WatchPhase::kStepChunkExchange, 15.1, 10, 0).fire);
  const cnn::StallVerdict signalled = judge_stall(WatchPhase::kStepChunkExchange, 5.1, 10, 15);
  BOOST_TEST(signalled.fire);
  BOOST_TEST(signalled.signal_exit);
  BOOST_TEST(std::string(cnn::watch_phase_name(WatchPhase::kStepChunk)) == "steps in one launch");
  BOOST_TEST(std::string(cnn::watch_phase_name(WatchPhase::kStepChunkExchange)) ==
             "steps in one launch, exchanging with the other ranks");
}

BOOST_AUTO_TEST_CASE(waiting_phases_defer_to_the_stalled_rank) {
  for (WatchPhase p : {WatchPhase::kAllreduce, WatchPhase::kStepEnd, WatchPhase::kEvalReduce,
                       WatchPhase::kCheckpointWait}) {
    BOOST_TEST(cnn::waits_for_peers(p));
    const auto v = judge_stall(p, 10.1, 10, 0);
    BOOST_TEST(!v.fire);
    BOOST_TEST(v.limit >= 10 + cnn::kMinWaitGraceSeconds);
    BOOST_TEST(judge_stall(p, 10 + 60, 10, 0).fire);
  }
  // The grace grows with the timeout (a quarter of it), so long timeouts keep the order too.
  BOOST_TEST(judge_stall(WatchPhase::kAllreduce, 0, 300, 0).limit == 375.0);
}

BOOST_AUTO_TEST_CASE(a_pending_stop_signal_shortens_a_wait_only) {
  const auto waiting = judge_stall(WatchPhase::kAllreduce, cnn::kStopSignalGraceSeconds + 0.1, 300, SIGTERM);
  BOOST_TEST(waiting.fire);
  BOOST_TEST(waiting.signal_exit);
  const auto working = judge_stall(WatchPhase::kCheckpoint, cnn::kStopSignalGraceSeconds + 0.1, 300, SIGTERM);
  BOOST_TEST(!working.fire);  // writing the checkpoint the signal asked for is progress to wait for
  BOOST_TEST(!working.signal_exit);
}

BOOST_AUTO_TEST_CASE(waiting_ranks_fire_one_after_another_and_only_rank_0_reports_a_signal) {
  // A stopped rank leaves every other rank waiting: rank 0 fires first, rank r r seconds later (capped),
  // so the first abort ends the others before they print a line of their own.
  const double rank0 = judge_stall(WatchPhase::kAllreduce, 0, 10, 0, 0).limit;
  BOOST_TEST(judge_stall(WatchPhase::kAllreduce, 0, 10, 0, 1).limit == rank0 + cnn::kRankStaggerSeconds);
  BOOST_TEST(judge_stall(WatchPhase::kAllreduce, 0, 10, 0, 3).limit == rank0 + 3 * cnn::kRankStaggerSeconds);
  BOOST_TEST(judge_stall(WatchPhase::kAllreduce, 0, 10, 0, 5000).limit == rank0 + cnn::kMaxRankStaggerSeconds);
  // Own work is not staggered: the stalled rank itself reports first.
  BOOST_TEST(judge_stall(WatchPhase::kForwardBackward, 0, 10, 0, 7).limit == 10.0);
  // The launcher's SIGTERM after another rank's abort: rank 0 says so, the others leave without a line.
  const auto root = judge_stall(WatchPhase::kStepEnd, cnn::kStopSignalGraceSeconds + 1, 10, SIGTERM, 0);
  const auto other = judge_stall(WatchPhase::kStepEnd, cnn::kStopSignalGraceSeconds + 1, 10, SIGTERM, 2);
  BOOST_TEST((root.fire && root.signal_exit && !root.quiet));
  BOOST_TEST((other.fire && other.signal_exit && other.quiet));
}

BOOST_AUTO_TEST_CASE(a_look_far_later_than_the_tick_means_the_process_was_suspended) {
  // After SIGSTOP and the launcher's SIGCONT, the stopped rank must not report its own "stall".
  BOOST_TEST(!cnn::was_suspended(0.2, 0.2));
  BOOST_TEST(!cnn::was_suspended(1.3, 0.2));  // a loaded machine's late look is not a suspension
  BOOST_TEST(cnn::was_suspended(7.0, 0.2));
  BOOST_TEST(cnn::was_suspended(3.5, 1.0));
}

BOOST_AUTO_TEST_CASE(idle_and_off_never_fire) {
  BOOST_TEST(!judge_stall(WatchPhase::kIdle, 1e9, 10, 0).fire);
  BOOST_TEST(!judge_stall(WatchPhase::kForwardBackward, 1e9, 0, 0).fire);
}

BOOST_AUTO_TEST_CASE(a_watchdog_with_steady_heartbeats_stays_quiet) {
  // A short timeout and heartbeats well inside it: the thread must not fire (it would abort this test).
  cnn::Watchdog watchdog(0.2, 0, "test");
  for (int i = 0; i < 30; ++i) {
    cnn::heartbeat(WatchPhase::kForwardBackward);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  cnn::heartbeat(WatchPhase::kIdle);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // idle: no verdict however long
  BOOST_TEST(true);
}
