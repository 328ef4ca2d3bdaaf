#include "cnn/trainer.hpp"

#include <cstdio>
#include <stdexcept>

#include "cnn/chunk_plan.hpp"
#include "cnn/divergence.hpp"
#include "cnn/heartbeat_observer.hpp"
#include "cnn/progress_observer.hpp"
#include "cnn/run_log_observer.hpp"
#include "cnn/run_setup.hpp"
#include "cnn/sampler.hpp"
#include "cnn/signals.hpp"
#include "cnn/timing_observer.hpp"
#include "cnn/trace_observer.hpp"
#include "cnn/train_step.hpp"
#include "cnn/training_observer.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

namespace {

// The epoch's train stats so far, summed over ranks (collective).
BatchStats sum_over_ranks(const MpiWorld& world, const BatchStats& mine) {
  double sums[1] = {mine.loss_sum};
  std::int64_t counts[2] = {mine.correct, mine.count};
  world.allreduce_sum(sums, 1);
  world.allreduce_sum(counts, 2);
  return BatchStats{sums[0], counts[0], counts[1]};
}

// In the order they hear of each event (training_observer.hpp): the timing after the trace's wait for
// a traced step's device work, the rows after the timing fills them, the step hooks after the step is
// timed, the trace's gather after that, and the progress line last.
ObserverList make_observers(const TrainConfig& config, const MpiWorld& world, const TestHooks& hooks,
                            TrainingRun& run, PhaseTimes& times, double process_start, double run_start) {
  const bool root = world.rank() == 0;
  const std::int64_t steps = batches_per_epoch(run.data->train_count(), config.batch);
  ObserverList observers;
  observers.add(std::make_unique<StartupLine>(root, process_start));
  observers.add(std::make_unique<HeartbeatObserver>(world, config.out_dir, config.stall_timeout, hooks.stall));
  TraceRecording* trace = nullptr;
  if (!config.trace.empty())
    trace = &observers.add(std::make_unique<TraceRecording>(world, *run.backend, times, config.trace_steps));
  const TimingObserver& timing = observers.add(
      std::make_unique<TimingObserver>(world, *run.backend, *run.comm, times, run.data->train_count(), run_start));
  observers.add(std::make_unique<RunLogObserver>(*run.log, timing, world.rank(), world.size(),
                                                 run.network.layout.total() * static_cast<std::int64_t>(sizeof(float)),
                                                 run.overlap.get()));
  observers.add(std::make_unique<StopAfterStepsHook>(hooks, world.rank()));
  if (trace) observers.add(std::make_unique<TraceWriting>(world, trace->recorder(), config.trace));
  observers.add(std::make_unique<ProgressObserver>(root, config.quiet, steps, config.epochs, config.batch));
  return observers;
}

// The loop over epochs and steps. Every rank runs the same steps and reaches every collective (the
// allreduce, the stop agreement, the checkpoints, the observers' reductions) in the same order.
class TrainingLoop {
 public:
  TrainingLoop(const TrainConfig& config, const MpiWorld& world, const TestHooks& hooks, TrainingRun& run,
               double process_start, double run_start)
      : config_(config), world_(world), run_(run), backend_(*run.backend), data_(*run.data),
        sampler_(config.seed, data_.train_count()), steps_(batches_per_epoch(data_.train_count(), config.batch)),
        from_(run.resume.state.progress), progress_(from_),
        last_metrics_(run.resume.state.metrics),
        divergence_(config.on_nonfinite, run.network.layout, &world, world.rank(), hooks.nan_at),
        observers_(make_observers(config, world, hooks, run, times_, process_start, run_start)) {
    // Every rank's chunks end where the hook fires (signals.cpp fires it on its rank alone): ranks whose
    // kernels exchange inside a chunk must run chunks of the same steps.
    stop_after_steps_ = hooks.stop_after_steps;
    // A signal must reach a chunk running inside the backend: it stops at the next step boundary.
    if (run_.chunks.chunked()) mirror_stop_signal(backend_.chunk_stop_word());
    // The resumed partial epoch's train stats, summed over ranks at its save, are rank 0's to carry on.
    if (world.rank() == 0) epoch_stats_ = BatchStats{from_.epoch_loss_sum, from_.epoch_correct, from_.epoch_samples};
    progress_.epoch_loss_sum = 0.0;
    progress_.epoch_correct = 0;
    progress_.epoch_samples = 0;
  }

  ~TrainingLoop() {
    if (run_.chunks.chunked()) mirror_stop_signal(nullptr);
  }
  TrainingLoop(const TrainingLoop&) = delete;
  TrainingLoop& operator=(const TrainingLoop&) = delete;

  TrainSummary run() {
    TrainSummary summary;
    for (std::int64_t epoch = from_.epoch; epoch < config_.epochs; ++epoch) {
      const EpochMetrics metrics = run_epoch(epoch);
      summary.final_test_accuracy = metrics.test_accuracy;
      summary.final_test_loss = metrics.test_loss;
      summary.final_train_loss = metrics.train_loss;
    }
    // Every completed run ends with its final checkpoint on disk (or with its write's error).
    run_.checkpointer->wait(progress_.global_step, times_);
    observers_.run_end();
    if (const std::string report = data_.read_report(); !report.empty()) {
      std::printf("%s\n", report.c_str());
      std::fflush(stdout);
    }
    if (world_.rank() == 0 && divergence_.policy() == NonFinitePolicy::kSkip)
      std::printf("skipped_steps: %lld (non-finite gradients, --on-nonfinite skip)\n",
                  static_cast<long long>(divergence_.skipped_total()));
    summary.params = backend_.download_params();
    return summary;
  }

 private:
  EpochMetrics run_epoch(std::int64_t epoch) {
    const std::int64_t first_step = epoch == from_.epoch ? from_.step_in_epoch : 0;
    observers_.phase_begin(LoopPhase::kData);
    // The order is a pure function of (seed, epoch): resumable mid-epoch. Set-up bound the first one.
    if (epoch != from_.epoch) apply_binding(backend_, data_.begin_epoch(sampler_.permutation(epoch), 0));
    observers_.epoch_start({epoch, first_step});
    for (std::int64_t step = first_step; step < steps_;) {
      // One step, or a chunk of whole steps in one backend call (--steps-per-launch, chunk_plan.hpp).
      step = run_.chunks.chunked() ? run_chunk(epoch, step) : run_step(epoch, step);
      if (step == steps_) break;  // the epoch's end below saves and stops, with the epoch's metrics
      // One int allreduce per step: a signal on any rank stops all at the same step (cost: CHECKPOINT.md).
      if (const int signo = agree_at_boundary()) stop(signo, epoch + 1, step, save_mid_epoch());
      if (run_.checkpointer->due_after_step(progress_.global_step)) save_mid_epoch();
    }
    const EpochMetrics metrics = end_epoch(epoch);
    const int signo = agree_at_boundary();  // also catches a signal that came during the evaluation
    std::string path;
    if (signo != 0 || run_.checkpointer->due_after_epoch(progress_.epoch, progress_.global_step))
      path = run_.checkpointer->save(backend_, progress_, last_metrics_, times_);
    // A signal after the last epoch changes nothing: the run is complete and says so with exit 0.
    if (signo != 0 && progress_.epoch < config_.epochs) stop(signo, epoch + 1, steps_, path);
    return metrics;
  }

  // The stop signal the ranks agree on (0: none), in the same reduction as whether rank 0's background
  // checkpoint write has failed; a failed write ends the run here, on every rank, with its one line.
  int agree_at_boundary() {
    const StepBoundary at = agree_at_step_boundary(world_, run_.checkpointer->poll(progress_.global_step));
    if (at.checkpoint_failed) run_.checkpointer->wait(progress_.global_step, times_);  // throws on every rank
    return at.signo;
  }

  // Stopped by a signal with the checkpoint at `path` just started: its write, and any before it that
  // was still in flight, complete on disk before the line that names it and exit 5.
  [[noreturn]] void stop(int signo, std::int64_t epoch, std::int64_t step, const std::string& path) {
    run_.checkpointer->wait(progress_.global_step, times_);
    stop_for_signal(world_, signo, epoch, step, path);
  }

  // data -> step (gradients, exchange, check, update). Returns the next step.
  std::int64_t run_step(std::int64_t epoch, std::int64_t step) {
    // Stream mode re-binds the backend when the step starts a new window of samples (after the last
    // step's deferred check, which may recompute that step on the old window).
    if (data_.rebinds_before(step)) divergence_.settle(backend_);
    const StepData data = data_.step_batch(step, global_batch_range(step, data_.train_count(), config_.batch));
    apply_binding(backend_, data.rebind);
    StepEvent event{epoch, step, progress_.global_step, steps_run_};
    observers_.step_begin(event);
    run_.optimizer.step = progress_.global_step + 1;  // one update per step, counted over the whole run
    // A function of the global step alone: every rank, and a resumed run, computes the same float.
    run_.optimizer.lr = run_.learning_rate->at_float(progress_.global_step);
    // Dropout's masks: a pure function of (seed, global step, sample in the global batch), so a resume
    // or another rank count draws the same ones.
    backend_.set_step_randomness({config_.seed, progress_.global_step, data.batch.begin});
    divergence_.begin_step(backend_, progress_.global_step);
    train_step(backend_, *run_.comm, run_.optimizer, run_.network.layout.total(), data.batch, times_,
               run_.overlap.get(), &divergence_);
    event.steps_run = ++steps_run_;
    progress_.step_in_epoch = step + 1;
    progress_.global_step += 1;
    progress_.samples_seen += data.batch.count;
    observers_.step_end(event);
    return step + 1;
  }

  // Steps [step, end) of this rank in one Backend::train_chunk call, `end` where the loop must act
  // (chunk_plan.hpp). The observers hear of each step as in run_step: the first one's begin before the
  // call (its heartbeat; the chunk's wall time is its), the rest after it. Returns the step after the
  // last one applied; a refused step stops the run as the one-step loop's check would.
  std::int64_t run_chunk(std::int64_t epoch, std::int64_t step) {
    ChunkBounds bounds;
    bounds.step = step;
    bounds.steps_per_epoch = steps_;
    bounds.cap = run_.chunks.cap;
    bounds.train_count = data_.train_count();
    bounds.batch = config_.batch;
    bounds.global_step = progress_.global_step;
    bounds.checkpoint_due = [this](std::int64_t global_step) { return run_.checkpointer->due_after_step(global_step); };
    bounds.steps_until_stop_hook = stop_after_steps_ > steps_run_ ? stop_after_steps_ - steps_run_ : 0;
    const std::int64_t steps = chunk_end(bounds) - step;
    // Every step of a chunk has the global batch of its first (chunk_end), and each rank its slice of it.
    const Range first = global_batch_range(step, data_.train_count(), config_.batch);
    const Range mine = rank_slice(first, world_.rank(), world_.size());
    StepChunk chunk =
        make_step_chunk(run_.optimizer, *run_.learning_rate, config_.seed, progress_.global_step, mine,
                        first.count, steps, divergence_.nan_hook_index(progress_.global_step, steps));
    StepEvent event{epoch, step, progress_.global_step, steps_run_};
    observers_.step_begin(event);
    times_ += backend_.take_phase_times();  // none of the chunk's steps' time (train_chunk takes theirs)
    // A chunk of several ranks exchanges inside the call: every step waits for the others there.
    heartbeat(world_.size() > 1 ? WatchPhase::kStepChunkExchange : WatchPhase::kStepChunk);
    const std::int64_t chunk_first_step = progress_.global_step;
    // The step in flight, 1-based, as the one-step loop reports it (HeartbeatObserver::on_step_begin).
    chunk.on_progress = [chunk_first_step](std::int64_t done) { heartbeat_step(chunk_first_step + done + 1); };
    const StepChunkResult result = backend_.train_chunk(chunk);
    for (const ChunkStepTimes& t : result.times) {
      times_.add(Phase::kForward, t.forward);
      times_.add(Phase::kBackward, t.backward);
      times_.add(Phase::kUpdate, t.update);
    }
    for (std::int64_t k = 0; k < result.steps_done; ++k) {
      if (k > 0) {
        event = StepEvent{epoch, step + k, progress_.global_step, steps_run_};
        observers_.step_begin(event);
      }
      event.steps_run = ++steps_run_;
      progress_.step_in_epoch = step + k + 1;
      progress_.global_step += 1;
      progress_.samples_seen += first.count;
      observers_.step_end(event);
    }
    if (result.nonfinite_index >= 0) {
      if (result.steps_done > 0) observers_.step_begin({epoch, step + result.steps_done, progress_.global_step, steps_run_});
      const Range refused{mine.begin + result.steps_done * first.count, mine.count};
      divergence_.on_chunk_nonfinite(backend_, progress_.global_step, result.nonfinite_index, refused);  // throws (stop)
    }
    if (result.steps_done == 0 && !result.stop_seen)
      throw std::logic_error("Backend::train_chunk ran none of its steps without a stop or a refused step");
    return step + result.steps_done;
  }

  // The device's queued steps, the epoch's train stats and evaluation, and its row.
  EpochMetrics end_epoch(std::int64_t epoch) {
    observers_.phase_begin(LoopPhase::kDrain);
    divergence_.settle(backend_);  // the epoch's last step, before its stats, evaluation and checkpoint
    backend_.synchronize();
    observers_.phase_end(LoopPhase::kDrain);

    epoch_stats_ += divergence_.take_train_stats(backend_);
    const BatchStats train = sum_over_ranks(world_, epoch_stats_);
    epoch_stats_ = BatchStats{};
    const double train_loss = train.loss_sum / static_cast<double>(train.count);
    check_epoch_loss(world_, epoch + 1, train_loss);  // every rank holds the same value

    observers_.phase_begin(LoopPhase::kEval);
    const BatchStats test = evaluate_test_set(backend_, world_, data_.test_count(), data_.test_held_from());
    observers_.phase_end(LoopPhase::kEval);

    EpochMetrics metrics;
    metrics.epoch = epoch + 1;
    metrics.train_loss = train_loss;
    metrics.test_loss = test.loss_sum / static_cast<double>(test.count);
    metrics.test_accuracy = static_cast<double>(test.correct) / static_cast<double>(test.count);
    metrics.skipped_steps = divergence_.take_skipped();
    observers_.epoch_end(metrics);  // timing, then the rows and the epoch's line
    last_metrics_ = CheckpointMetrics{metrics.train_loss, metrics.test_loss, metrics.test_accuracy};
    progress_.epoch = epoch + 1;
    progress_.step_in_epoch = 0;
    return metrics;
  }

  // Mid-epoch saves carry the partial epoch's stats summed over ranks, so a resume logs the exact loss.
  std::string save_mid_epoch() {
    divergence_.settle(backend_);  // a step the device left unapplied stops the run before its checkpoint
    epoch_stats_ += divergence_.take_train_stats(backend_);
    const BatchStats total = sum_over_ranks(world_, epoch_stats_);
    CheckpointProgress at = progress_;
    at.epoch_loss_sum = total.loss_sum;
    at.epoch_correct = total.correct;
    at.epoch_samples = total.count;
    return run_.checkpointer->save(backend_, at, last_metrics_, times_);
  }

  const TrainConfig& config_;
  const MpiWorld& world_;
  TrainingRun& run_;
  Backend& backend_;
  TrainingData& data_;
  const Sampler sampler_;
  const std::int64_t steps_;                // per epoch
  const CheckpointProgress from_;           // where the run (re)started
  CheckpointProgress progress_;             // steps done; carries no partial-epoch stats to later saves
  // The unfinished epoch's train stats: this rank's own since the last save, plus (on rank 0 only)
  // what the resumed checkpoint had summed over all ranks before the stop.
  BatchStats epoch_stats_;
  CheckpointMetrics last_metrics_;
  std::int64_t steps_run_ = 0;              // by this process
  std::int64_t stop_after_steps_ = 0;       // the test hook CNN_TEST_STOP_AFTER_STEPS (0: off), for the chunks' ends
  PhaseTimes times_;                        // phase seconds since the last epoch row
  DivergenceGuard divergence_;
  ObserverList observers_;                  // last: its watchdog watches the loop only
};

}  // namespace

TrainSummary train(const TrainConfig& config, const MpiWorld& world, const TestHooks& hooks, double process_start,
                   std::future<std::unique_ptr<TrainingData>> data) {
  const double run_start = wall_seconds();  // metrics.csv's wall_seconds count from here
  const std::unique_ptr<TrainingRun> run = set_up_run(config, world, std::move(data));
  if (!run) {
    TrainSummary summary;
    summary.already_complete = true;
    return summary;
  }
  return TrainingLoop(config, world, hooks, *run, process_start, run_start).run();
}

}  // namespace cnn
