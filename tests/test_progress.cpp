// The progress line: live only on a terminal, redrawn at most kProgressRedrawHz times a second,
// with step count, images/s and ETA; nothing per step otherwise.
#define BOOST_TEST_MODULE progress
#include <cstdio>
#include <string>

#include "boost_test.hpp"
#include "cnn/progress.hpp"

namespace {

// Everything written to a temporary FILE*.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f)) text += static_cast<char>(c);
  return text;
}

}  // namespace

BOOST_AUTO_TEST_CASE(mode_follows_terminal_and_quiet) {
  BOOST_TEST((cnn::progress_mode(false, true) == cnn::ProgressMode::kLive));
  BOOST_TEST((cnn::progress_mode(false, false) == cnn::ProgressMode::kPlain));
  BOOST_TEST((cnn::progress_mode(true, true) == cnn::ProgressMode::kOff));
  BOOST_TEST((cnn::progress_mode(true, false) == cnn::ProgressMode::kOff));
}

BOOST_AUTO_TEST_CASE(durations_format_as_clock_time) {
  BOOST_TEST(cnn::format_duration(0) == "0:00");
  BOOST_TEST(cnn::format_duration(65) == "1:05");
  BOOST_TEST(cnn::format_duration(3723) == "1:02:03");
  BOOST_TEST(cnn::format_duration(-1) == "?");
}

BOOST_AUTO_TEST_CASE(live_line_shows_steps_rate_and_eta) {
  std::FILE* f = std::tmpfile();
  BOOST_TEST_REQUIRE(f != nullptr);
  // 100 steps of 50 images per epoch, 3 epochs; 10 steps done in the first second.
  cnn::ProgressLine line(cnn::ProgressMode::kLive, f, 100, 3, 50);
  line.begin_epoch(0, 0, 0.0);
  line.update(10, 1.0);
  // 90 steps left in the epoch and 290 in the run, at 10 steps/s.
  BOOST_TEST(line.last_line() == "epoch 1/3  step 10/100  500 images/s  ETA epoch 0:09  run 0:29");
  line.end_epoch();
  const std::string out = contents(f);
  BOOST_TEST(out.find("\repoch 1/3  step 10/100") == 0u);
  BOOST_TEST(out.back() == '\r');  // erased, so the plain epoch line starts at column 0
  std::fclose(f);
}

BOOST_AUTO_TEST_CASE(redraws_are_limited_to_ten_per_second) {
  std::FILE* f = std::tmpfile();
  cnn::ProgressLine line(cnn::ProgressMode::kLive, f, 10000, 1, 1);
  line.begin_epoch(0, 0, 0.0);
  for (int step = 1; step <= 10000; ++step) line.update(step, step * 1e-4);  // 1 s of fast steps
  const std::string out = contents(f);
  std::size_t draws = 0;
  for (char c : out) draws += c == '\r';
  BOOST_TEST(draws <= static_cast<std::size_t>(cnn::kProgressRedrawHz) + 1);
  std::fclose(f);
}

BOOST_AUTO_TEST_CASE(plain_and_off_write_nothing_per_step) {
  for (cnn::ProgressMode mode : {cnn::ProgressMode::kPlain, cnn::ProgressMode::kOff}) {
    std::FILE* f = std::tmpfile();
    cnn::ProgressLine line(mode, f, 10, 1, 1);
    line.begin_epoch(0, 0, 0.0);
    for (int step = 1; step <= 10; ++step) line.update(step, step);
    line.end_epoch();
    BOOST_TEST(contents(f).empty());
    std::fclose(f);
  }
}

BOOST_AUTO_TEST_CASE(resumed_epoch_counts_only_steps_run_here) {
  std::FILE* f = std::tmpfile();
  cnn::ProgressLine line(cnn::ProgressMode::kLive, f, 100, 1, 10);
  line.begin_epoch(0, 50, 0.0);  // resumed at step 50
  line.update(60, 1.0);          // 10 steps in 1 s
  BOOST_TEST(line.last_line().find("100 images/s") != std::string::npos);
  BOOST_TEST(line.last_line().find("ETA epoch 0:04") != std::string::npos);
  std::fclose(f);
}
