// What watches the training loop without steering it: timing, the trace, the progress line, the
// watchdog's heartbeats, the run log and the tests' step hooks (trainer.cpp). The loop notifies every
// observer of each event, in the order they were added; the list is the same on every rank, so the
// collectives an observer runs (the epoch's timing reductions, the trace's gather) pair up.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cnn/run_log.hpp"

namespace cnn {

struct EpochEvent {
  std::int64_t epoch = 0;       // 0-based
  std::int64_t first_step = 0;  // the first step run in it (later than 0 in a resumed epoch)
};

struct StepEvent {
  std::int64_t epoch = 0;        // 0-based
  std::int64_t step = 0;         // in the epoch, 0-based
  std::int64_t global_step = 0;  // the steps of the run before this one: its 0-based index in the run
  std::int64_t steps_run = 0;    // steps run by this process; at on_step_end this one included
};

// The parts of an epoch's end that take time of their own.
enum class LoopPhase {
  kData,   // the epoch's sample order is given to the data (stream mode starts reading a window)
  kDrain,  // the device finishes the epoch's queued steps (step time too) and the last check is read
  kEval,   // the test set
};

class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  virtual void on_epoch_start(const EpochEvent&) {}
  // Around each step's work (the data is bound; the update is applied or skipped before the end).
  virtual void on_step_begin(const StepEvent&) {}
  virtual void on_step_end(const StepEvent&) {}
  virtual void on_phase_begin(LoopPhase) {}
  virtual void on_phase_end(LoopPhase) {}
  // The epoch's row: the loop fills the losses, the accuracy and the skipped steps; the timing
  // observer, added first, fills its times before the others read them.
  virtual void on_epoch_end(EpochMetrics&) {}
  virtual void on_run_end() {}
};

class ObserverList {
 public:
  // Returns the observer, for the few that others read (the timing observer).
  template <class T>
  T& add(std::unique_ptr<T> observer) {
    T& added = *observer;
    observers_.push_back(std::move(observer));
    return added;
  }
  void epoch_start(const EpochEvent& e) { for (auto& o : observers_) o->on_epoch_start(e); }
  void step_begin(const StepEvent& e) { for (auto& o : observers_) o->on_step_begin(e); }
  void step_end(const StepEvent& e) { for (auto& o : observers_) o->on_step_end(e); }
  void phase_begin(LoopPhase p) { for (auto& o : observers_) o->on_phase_begin(p); }
  void phase_end(LoopPhase p) { for (auto& o : observers_) o->on_phase_end(p); }
  void epoch_end(EpochMetrics& m) { for (auto& o : observers_) o->on_epoch_end(m); }
  void run_end() { for (auto& o : observers_) o->on_run_end(); }

 private:
  std::vector<std::unique_ptr<TrainingObserver>> observers_;
};

}  // namespace cnn
