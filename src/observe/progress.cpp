#include "cnn/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace cnn {

namespace {

constexpr int kSecondsPerMinute = 60;
constexpr int kSecondsPerHour = 3600;

}  // namespace

ProgressMode progress_mode(bool quiet, bool stdout_is_terminal) {
  if (quiet) return ProgressMode::kOff;
  return stdout_is_terminal ? ProgressMode::kLive : ProgressMode::kPlain;
}

// Open MPI's mpirun hands its ranks a pseudo-terminal whatever its own stdout is (a SLURM log file,
// a pipe), so under mpirun isatty() says nothing about where the output ends up: print plain lines
// there. OMPI_COMM_WORLD_SIZE is set by mpirun's launcher (not by a singleton run without mpirun).
static bool stdout_is_real_terminal() {
  return isatty(STDOUT_FILENO) == 1 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr;
}

ProgressMode progress_mode_for_stdout(bool quiet) { return progress_mode(quiet, stdout_is_real_terminal()); }

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0) return "?";
  const auto total = static_cast<long long>(std::llround(seconds));
  const long long h = total / kSecondsPerHour;
  const long long m = (total % kSecondsPerHour) / kSecondsPerMinute;
  const long long s = total % kSecondsPerMinute;
  char text[32];
  if (h > 0)
    std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", h, m, s);
  else
    std::snprintf(text, sizeof(text), "%lld:%02lld", m, s);
  return text;
}

ProgressLine::ProgressLine(ProgressMode mode, std::FILE* out, std::int64_t steps_per_epoch, std::int64_t epochs,
                           std::int64_t images_per_step)
    : mode_(mode), out_(out), steps_per_epoch_(steps_per_epoch), epochs_(epochs), images_per_step_(images_per_step) {}

void ProgressLine::begin_epoch(std::int64_t epoch, std::int64_t first_step, double now_seconds) {
  epoch_ = epoch;
  first_step_ = first_step;
  epoch_start_ = now_seconds;
  drawn_ = false;
}

void ProgressLine::update(std::int64_t steps_done, double now_seconds) {
  if (mode_ != ProgressMode::kLive) return;
  if (drawn_ && now_seconds - last_draw_ < 1.0 / kProgressRedrawHz) return;
  const double elapsed = now_seconds - epoch_start_;
  const std::int64_t run_here = steps_done - first_step_;
  if (run_here <= 0 || elapsed <= 0.0) return;
  // Rates from this epoch only: the previous epoch's evaluation and checkpoint are not steps.
  const double steps_per_second = static_cast<double>(run_here) / elapsed;
  const double images_per_second = steps_per_second * static_cast<double>(images_per_step_);
  const std::int64_t left_in_epoch = steps_per_epoch_ - steps_done;
  const std::int64_t left_in_run = left_in_epoch + (epochs_ - epoch_ - 1) * steps_per_epoch_;
  char line[160];
  std::snprintf(line, sizeof(line), "epoch %lld/%lld  step %lld/%lld  %.0f images/s  ETA epoch %s  run %s",
                static_cast<long long>(epoch_ + 1), static_cast<long long>(epochs_),
                static_cast<long long>(steps_done), static_cast<long long>(steps_per_epoch_), images_per_second,
                format_duration(static_cast<double>(left_in_epoch) / steps_per_second).c_str(),
                format_duration(static_cast<double>(left_in_run) / steps_per_second).c_str());
  last_line_ = line;
  // Pad to the previous width so a shorter line leaves no stale characters behind.
  const std::size_t width = last_line_.size();
  std::fprintf(out_, "\r%s%*s", line, static_cast<int>(drawn_width_ > width ? drawn_width_ - width : 0), "");
  std::fflush(out_);
  drawn_width_ = std::max(drawn_width_, width);
  drawn_ = true;
  last_draw_ = now_seconds;
}

void ProgressLine::end_epoch() {
  if (mode_ != ProgressMode::kLive || drawn_width_ == 0) return;
  std::fprintf(out_, "\r%*s\r", static_cast<int>(drawn_width_), "");
  std::fflush(out_);
  drawn_width_ = 0;
  drawn_ = false;
}

}  // namespace cnn
