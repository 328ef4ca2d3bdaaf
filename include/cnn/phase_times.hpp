// The phases of a training step, and seconds spent in each. Backends time their own phases (data,
// h2d, forward, backward, update); the trainer times allreduce, eval and checkpoint.
#pragma once

#include <array>
#include <chrono>

namespace cnn {

enum class Phase : int { kData, kH2D, kForward, kBackward, kAllreduce, kUpdate, kEval, kCheckpoint };
inline constexpr int kPhaseCount = 8;

inline const char* phase_name(Phase phase) {
  static constexpr const char* kNames[kPhaseCount] = {"data",      "h2d",    "forward", "backward",
                                                      "allreduce", "update", "eval",    "checkpoint"};
  return kNames[static_cast<int>(phase)];
}

struct PhaseTimes {
  std::array<double, kPhaseCount> seconds{};

  void add(Phase phase, double s) { seconds[static_cast<int>(phase)] += s; }
  double get(Phase phase) const { return seconds[static_cast<int>(phase)]; }
  PhaseTimes& operator+=(const PhaseTimes& other) {
    for (int i = 0; i < kPhaseCount; ++i) seconds[i] += other.seconds[i];
    return *this;
  }
};

// Monotonic wall clock in seconds.
inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace cnn
