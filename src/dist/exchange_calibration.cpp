// The advisor's harness and its first piece, the step's compute (exchange_calibration.hpp).
#include "cnn/exchange_calibration.hpp"

#include <algorithm>

namespace cnn {

double median(std::vector<double> samples) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

double CalibrationHarness::time(const std::function<void()>& body, int repeats) const {
  std::vector<double> samples;
  for (int r = 0; r <= repeats; ++r) {
    backend_.synchronize();
    world_.barrier();
    const double start = wall_seconds();
    body();
    backend_.synchronize();
    if (r > 0) samples.push_back(wall_seconds() - start);  // r == 0 warms up (graph capture, buffers)
  }
  return world_.allreduce_max(median(samples));
}

double CalibrationHarness::compute_seconds() const {
  return time([&] { backend_.compute_gradients(mine_.begin, mine_.count); });
}

void CalibrationHarness::overlapped_step(OverlapReducer& reducer) const {
  backend_.compute_gradients_overlapped(mine_.begin, mine_.count, reducer);
}

}  // namespace cnn
