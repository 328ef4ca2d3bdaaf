#include "cnn/progress_observer.hpp"

namespace cnn {
namespace {

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f%%", 100.0 * fraction);
  return text;
}

}  // namespace

void StartupLine::on_step_begin(const StepEvent& e) {
  if (!root_ || e.steps_run != 0) return;
  std::printf("startup: %.3f s to first step\n", wall_seconds() - process_start_);
  std::fflush(stdout);
}

void ProgressObserver::on_epoch_end(EpochMetrics& m) {
  if (!root_ || (quiet_ && m.epoch != epochs_)) return;
  std::printf("epoch %lld/%d  train_loss %.4f  test_loss %.4f  test_acc %s  images/s %.0f  epoch %.2fs\n",
              static_cast<long long>(m.epoch), epochs_, m.train_loss, m.test_loss, percent(m.test_accuracy).c_str(),
              m.images_per_second, m.epoch_seconds);
  std::fflush(stdout);
}

}  // namespace cnn
