#include "cnn/trace_observer.hpp"

namespace cnn {

TraceRecording::TraceRecording(const MpiWorld& world, Backend& backend, PhaseTimes& times, const std::string& steps)
    : backend_(backend), times_(times) {
  world.barrier();
  recorder_ = std::make_unique<TraceRecorder>(parse_trace_window(steps), wall_seconds());
}

void TraceRecording::on_step_begin(const StepEvent& e) {
  last_step_ = e.global_step;
  traced_ = recorder_->recording(e.global_step);
  if (!traced_) return;
  // A traced step reads its own phases: take what came before it.
  times_ += backend_.take_phase_times();
  before_ = times_;
  step_start_ = wall_seconds();
}

void TraceRecording::on_step_end(const StepEvent& e) {
  if (!traced_) return;
  backend_.synchronize();  // wait for the step's device work
  const double step_wall = wall_seconds() - step_start_;
  times_ += backend_.take_phase_times();
  PhaseTimes own = times_;
  for (std::size_t p = 0; p < own.seconds.size(); ++p) own.seconds[p] -= before_.seconds[p];
  recorder_->record_step(e.global_step, step_start_, step_wall, own);
}

void TraceRecording::on_phase_begin(LoopPhase phase) {
  if (phase == LoopPhase::kEval) eval_start_ = wall_seconds();
}

void TraceRecording::on_phase_end(LoopPhase phase) {
  // Shown after the epoch's last step when that step is in the window.
  if (phase == LoopPhase::kEval)
    recorder_->record(last_step_, static_cast<int>(Phase::kEval), eval_start_, wall_seconds() - eval_start_);
}

void TraceWriting::on_step_end(const StepEvent& e) {
  if (recorder_.window_done(e.global_step + 1)) recorder_.gather_and_write(world_, path_);
}

void TraceWriting::on_run_end() { recorder_.gather_and_write(world_, path_); }

}  // namespace cnn
