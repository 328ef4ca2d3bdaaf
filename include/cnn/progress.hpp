// Rank 0's progress during an epoch. On a terminal a live line, redrawn in place with '\r' at most
// kProgressRedrawHz times a second: step count, images/s and the time left (epoch and run). Elsewhere
// (SLURM logs, pipes) nothing per step: the trainer's one plain line per epoch is the whole log, so
// files do not fill with redraws. --quiet turns the live line off too.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace cnn {

enum class ProgressMode { kOff, kPlain, kLive };

// kLive only for a terminal and without --quiet; kOff with --quiet; kPlain otherwise.
ProgressMode progress_mode(bool quiet, bool stdout_is_terminal);
// The mode for this process's stdout (isatty).
ProgressMode progress_mode_for_stdout(bool quiet);

// Redraws faster than this are invisible and only cost terminal I/O.
inline constexpr double kProgressRedrawHz = 10.0;

// "1:02:03" or "2:03": h:mm:ss or m:ss, for ETAs.
std::string format_duration(double seconds);

class ProgressLine {
 public:
  // steps_per_epoch: global steps of a full epoch; images_per_step: the global batch.
  ProgressLine(ProgressMode mode, std::FILE* out, std::int64_t steps_per_epoch, std::int64_t epochs,
               std::int64_t images_per_step);

  // epoch is 0-based; first_step > 0 when a resumed run starts mid-epoch.
  void begin_epoch(std::int64_t epoch, std::int64_t first_step, double now_seconds);
  // steps_done: steps of this epoch completed so far (first_step + those run). Draws when due.
  void update(std::int64_t steps_done, double now_seconds);
  // Erases the live line, so that the epoch's plain line takes its place.
  void end_epoch();

  ProgressMode mode() const { return mode_; }
  // What the last update drew (empty if none), for tests.
  const std::string& last_line() const { return last_line_; }

 private:
  ProgressMode mode_;
  std::FILE* out_;
  std::int64_t steps_per_epoch_;
  std::int64_t epochs_;
  std::int64_t images_per_step_;
  std::int64_t epoch_ = 0;
  std::int64_t first_step_ = 0;
  double epoch_start_ = 0.0;
  double last_draw_ = 0.0;
  bool drawn_ = false;
  std::size_t drawn_width_ = 0;
  std::string last_line_;
};

}  // namespace cnn
