// --trace: a Chrome trace of the steps of --trace-steps (trace.hpp). Two observers share the
// recorder: TraceRecording takes each traced step's phases, with its device work waited for (added
// before the timing observer, so the step's wall time includes that work), and TraceWriting gathers
// and writes the file once the window has run (added after it, so the gather is no step's time).
#pragma once

#include <memory>
#include <string>

#include "cnn/backend.hpp"
#include "cnn/communicator.hpp"
#include "cnn/trace.hpp"
#include "cnn/training_observer.hpp"

namespace cnn {

class TraceRecording final : public TrainingObserver {
 public:
  // Collective: a barrier, so that every rank takes its time origin on leaving it and the ranks'
  // tracks line up. `times`: the run's phase seconds (a traced step's phases are read from them).
  TraceRecording(const MpiWorld& world, Backend& backend, PhaseTimes& times, const std::string& steps);

  void on_step_begin(const StepEvent& e) override;
  void on_step_end(const StepEvent& e) override;
  void on_phase_begin(LoopPhase phase) override;
  void on_phase_end(LoopPhase phase) override;

  TraceRecorder& recorder() { return *recorder_; }

 private:
  Backend& backend_;
  PhaseTimes& times_;
  std::unique_ptr<TraceRecorder> recorder_;
  bool traced_ = false;      // the step under way is in the window
  PhaseTimes before_;        // the phase times when it began
  double step_start_ = 0.0;
  double eval_start_ = 0.0;
  std::int64_t last_step_ = 0;  // the global index of the last step begun
};

class TraceWriting final : public TrainingObserver {
 public:
  TraceWriting(const MpiWorld& world, TraceRecorder& recorder, std::string path)
      : world_(world), recorder_(recorder), path_(std::move(path)) {}
  // Every rank reaches the window's end at the same step: the gather is collective.
  void on_step_end(const StepEvent& e) override;
  // A window past the run's end: what was recorded.
  void on_run_end() override;

 private:
  const MpiWorld& world_;
  TraceRecorder& recorder_;
  std::string path_;
};

}  // namespace cnn
