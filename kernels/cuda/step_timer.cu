// StepTimer: see step_timer.hpp.
#include "cuda/step_timer.hpp"

#include "cuda/cuda_check.hpp"

namespace cnn::cuda {
namespace {

double seconds_between(cudaEvent_t start, cudaEvent_t end) {
  float ms = 0.0f;
  CNN_CHECK_CUDA(cudaEventElapsedTime(&ms, start, end));
  return static_cast<double>(ms) * 1e-3;
}

}  // namespace

StepTimer::~StepTimer() {
  for (const Mark& mark : marks_) (void)cudaEventDestroy(mark.event);
  for (cudaEvent_t event : spare_) (void)cudaEventDestroy(event);
}

cudaEvent_t StepTimer::record() {
  cudaEvent_t event = nullptr;
  if (spare_.empty()) {
    CNN_CHECK_CUDA(cudaEventCreate(&event));
  } else {
    event = spare_.back();
    spare_.pop_back();
  }
  CNN_CHECK_CUDA(cudaEventRecord(event, stream_));
  return event;
}

void StepTimer::open() {
  if (marks_.size() >= kMaxMarks) harvest();
  marks_.push_back({record(), kOpens});
}

void StepTimer::close(Phase phase) { marks_.push_back({record(), static_cast<int>(phase)}); }

void StepTimer::close_graph_step() { marks_.push_back({record(), kGraphStep}); }

void StepTimer::harvest() {
  if (marks_.empty()) return;
  CNN_CHECK_CUDA(cudaEventSynchronize(marks_.back().event));
  double graph_seconds = 0.0;
  for (std::size_t i = 1; i < marks_.size(); ++i) {
    const Mark& mark = marks_[i];
    if (mark.phase == kOpens) continue;
    const double dt = seconds_between(marks_[i - 1].event, mark.event);
    if (mark.phase == kGraphStep) {
      graph_seconds += dt;
    } else {
      harvested_.add(static_cast<Phase>(mark.phase), dt);
      if (mark.phase == static_cast<int>(Phase::kData) || mark.phase == static_cast<int>(Phase::kForward) ||
          mark.phase == static_cast<int>(Phase::kBackward))
        eager_steps_.add(static_cast<Phase>(mark.phase), dt);
    }
  }
  const double data = eager_steps_.get(Phase::kData), forward = eager_steps_.get(Phase::kForward);
  const double whole = data + forward + eager_steps_.get(Phase::kBackward);
  if (graph_seconds > 0.0) {
    if (whole > 0.0) {
      harvested_.add(Phase::kData, graph_seconds * data / whole);
      harvested_.add(Phase::kForward, graph_seconds * forward / whole);
      harvested_.add(Phase::kBackward, graph_seconds * (whole - data - forward) / whole);
    } else {
      harvested_.add(Phase::kBackward, graph_seconds);  // no eager step measured yet: charge it whole
    }
  }
  // Keep the last mark when it opens an interval still to be closed.
  const bool keep_last = marks_.back().phase == kOpens;
  for (std::size_t i = 0; i + (keep_last ? 1 : 0) < marks_.size(); ++i) spare_.push_back(marks_[i].event);
  if (keep_last) {
    const Mark last = marks_.back();
    marks_.assign(1, last);
  } else {
    marks_.clear();
  }
}

PhaseTimes StepTimer::take() {
  harvest();
  const PhaseTimes result = harvested_;
  harvested_ = PhaseTimes{};
  return result;
}

}  // namespace cnn::cuda
