// --steps-per-launch auto's measurement of the one-step loop against the persistent kernel
// (step_path_advisor.hpp).
#include "cnn/step_path_advisor.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cnn/exchange_calibration.hpp"
#include "cnn/sampler.hpp"
#include "cnn/train_step.hpp"

namespace cnn {
namespace {

// Why a chunk ran fewer steps than asked; the larger wins over the ranks (allreduce_max).
enum CutShort : int { kNotCut = 0, kNonFinite = 1, kStopWord = 2 };

// The two paths over the run's steps [step_in_epoch, step_in_epoch + steps), and their timing.
class StepPathTimer {
 public:
  StepPathTimer(const StepPathRun& run, const StepPathClock& clock)
      : run_(run), world_(*run.world), backend_(*run.backend), clock_(clock),
        params_(backend_.download_params()), optimizer_state_(backend_.download_optimizer_state()),
        state_(backend_.download_state()) {}

  // The body's seconds on this rank, every rank's backend idle and met at a barrier before it and
  // this one's synchronised after; the run's parameters, optimizer state and state are put back after.
  template <typename Body>
  double time(Body&& body) {
    backend_.synchronize();
    world_.barrier();
    const double start = clock_();
    body();
    backend_.synchronize();
    const double seconds = clock_() - start;
    restore();
    return seconds;
  }

  // `steps` ordinary steps, each as the trainer's one-step loop runs it (trainer.cpp, run_step) but
  // without its divergence guard: the randomness, lr and step count of its global step, then train_step.
  void loop_steps(std::int64_t steps) {
    OptimizerSettings optimizer = run_.optimizer;
    PhaseTimes discarded;
    for (std::int64_t k = 0; k < steps; ++k) {
      const std::int64_t global_step = run_.global_step + k;
      const Range batch = global_batch_range(run_.step_in_epoch + k, run_.train_count, run_.batch);
      backend_.set_step_randomness({run_.seed, global_step, batch.begin});
      optimizer.step = global_step + 1;
      optimizer.lr = run_.learning_rate->at_float(global_step);
      train_step(backend_, *run_.comm, optimizer, run_.param_count, batch, discarded, run_.overlap);
    }
  }

  // The same steps in one train_chunk, as the trainer's run_chunk hands them over (no NaN test hook).
  // Returns why it stopped short of them, or kNotCut.
  CutShort chunk_steps(std::int64_t steps) {
    const Range first = global_batch_range(run_.step_in_epoch, run_.train_count, run_.batch);
    const Range mine = rank_slice(first, world_.rank(), world_.size());
    const StepChunk chunk = make_step_chunk(run_.optimizer, *run_.learning_rate, run_.seed, run_.global_step, mine,
                                            first.count, steps, -1);
    const StepChunkResult result = backend_.train_chunk(chunk);
    if (result.nonfinite_index >= 0) return kNonFinite;
    if (result.steps_done < steps) return kStopWord;  // the stop word, which stays set for the loop
    return kNotCut;
  }

  // What the steps left outside the three buffers: statistics and timings no step of the run made.
  void discard_side_effects() {
    (void)backend_.take_train_stats();
    (void)backend_.take_phase_times();
    (void)run_.comm->take_async_times();
    if (run_.overlap != nullptr) (void)run_.overlap->take_host_wait_seconds();
  }

 private:
  void restore() {
    backend_.upload_params(params_);
    backend_.upload_optimizer_state(optimizer_state_);
    backend_.upload_state(state_);
  }

  const StepPathRun& run_;
  const MpiWorld& world_;
  Backend& backend_;
  const StepPathClock& clock_;
  const std::vector<float> params_;  // the run's, from before the measurement
  const std::vector<float> optimizer_state_;
  const std::vector<float> state_;
};

StepPathMeasurement skipped(std::string why) {
  StepPathMeasurement m;
  m.skipped = std::move(why);
  return m;
}

}  // namespace

StepPathMeasurement measure_step_paths(const StepPathRun& run, const StepPathClock& clock) {
  const MpiWorld& world = *run.world;
  // A chunk's steps share one batch size (chunk_end): only the epoch's whole batches from here on.
  const std::int64_t whole_left = run.train_count / run.batch - run.step_in_epoch;
  if (whole_left < 2)
    return skipped(std::string(whole_left == 1 ? "1 whole step" : "no whole step") +
                   " left in the epoch, too few to time the persistent kernel against one launch per step");
  if (run.backend->take_train_stats().count != 0)
    throw std::logic_error("measure_step_paths: the backend holds train stats of steps before it, which it cannot put back");

  StepPathTimer timer(run, clock);
  int cut = kNotCut;
  timer.time([&] { timer.loop_steps(1); });  // warm-up: the step's graph and plans
  // One step's time sets K, the same on every rank (the chunks of 2+ ranks exchange inside the kernel).
  const double probe = world.allreduce_max(timer.time([&] { timer.loop_steps(1); }));
  const std::int64_t wanted = probe > 0.0 ? static_cast<std::int64_t>(std::ceil(kStepPathTargetSeconds / probe)) : whole_left;
  const std::int64_t steps = std::clamp<std::int64_t>(wanted, 2, whole_left);
  timer.time([&] { cut = std::max<int>(cut, timer.chunk_steps(steps)); });  // warm-up: the kernel's first launch
  std::vector<double> loop;
  std::vector<double> chunk;
  for (int r = 0; r < kStepPathRepeats; ++r) {
    loop.push_back(timer.time([&] { timer.loop_steps(steps); }));
    chunk.push_back(timer.time([&] { cut = std::max<int>(cut, timer.chunk_steps(steps)); }));
  }
  timer.discard_side_effects();

  cut = world.allreduce_max(cut);  // a stop or a non-finite step on any rank: no rank decides on it
  if (cut == kStopWord) return skipped("a stop signal cut the timing of the persistent kernel short");
  if (cut == kNonFinite) return skipped("a non-finite gradient cut the timing of the persistent kernel short");
  StepPathMeasurement m;
  m.loop_seconds = world.allreduce_max(median(loop)) / static_cast<double>(steps);
  m.chunk_seconds = world.allreduce_max(median(chunk)) / static_cast<double>(steps);
  return m;
}

}  // namespace cnn
