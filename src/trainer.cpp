#include "cnn/trainer.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "cnn/backend.hpp"
#include "cnn/checkpointer.hpp"
#include "cnn/collective_errors.hpp"
#include "cnn/dataset.hpp"
#include "cnn/divergence.hpp"
#include "cnn/launch_agreement.hpp"
#include "cnn/network.hpp"
#include "cnn/progress.hpp"
#include "cnn/resume.hpp"
#include "cnn/run_directory.hpp"
#include "cnn/run_log.hpp"
#include "cnn/scaling_advisor.hpp"
#include "cnn/sampler.hpp"
#include "cnn/signals.hpp"
#include "cnn/timing_stats.hpp"
#include "cnn/trace.hpp"
#include "cnn/train_step.hpp"
#include "cnn/utc_time.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

namespace {

// Each phase's seconds this epoch, reduced over ranks: min, mean, max and the slowest rank.
std::vector<PhaseSpread> reduce_phases(const MpiWorld& world, const PhaseTimes& mine) {
  std::vector<PhaseSpread> spreads;
  for (int p = 0; p < kPhaseCount; ++p) {
    const RankSpread r = reduce_over_ranks(world, mine.seconds[static_cast<std::size_t>(p)]);
    if (world.rank() != 0) continue;
    PhaseSpread s;
    s.phase = static_cast<Phase>(p);
    s.min = r.min;
    s.mean = r.mean;
    s.max = r.max;
    s.max_rank = r.max_rank;
    spreads.push_back(s);
  }
  return spreads;
}

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f%%", 100.0 * fraction);
  return text;
}

// What the run directory's owner needs to know about this start (run_directory.hpp; rank 0).
ResumeRequest resume_request(const TrainConfig& config, const ResumePoint& resume) {
  ResumeRequest request;
  if (!config.resume.empty())
    request.mode = config.resume == kResumeAuto ? ResumeRequest::Mode::kAuto : ResumeRequest::Mode::kPath;
  request.resumed = resume.resumed;
  request.checkpoint_run_id = resume.state.run_id;
  request.checkpoint_in_out = resume.from_out_dir;
  return request;
}

// runs.log: one line per start, so a requeued SLURM job's history is readable in one place.
std::string start_line(int ranks, const ResumePoint& resume, const std::string& run_id) {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* restart = std::getenv("SLURM_RESTART_COUNT");
  std::ostringstream line;
  line << utc_time() << ", slurm_job=" << (job ? job : "-") << ", restart=" << (restart ? restart : "0")
       << ", ranks=" << ranks << ", resumed_from=" << (resume.resumed ? resume.path : std::string("fresh"))
       << ", run_id=" << run_id;
  return line.str();
}

// The epoch's train stats so far, summed over ranks (collective).
BatchStats sum_over_ranks(const MpiWorld& world, const BatchStats& mine) {
  double sums[1] = {mine.loss_sum};
  std::int64_t counts[2] = {mine.correct, mine.count};
  world.allreduce_sum(sums, 1);
  world.allreduce_sum(counts, 2);
  return BatchStats{sums[0], counts[0], counts[1]};
}

}  // namespace

TrainSummary train(const TrainConfig& config, const MpiWorld& world, double process_start,
                   std::future<std::unique_ptr<TrainingData>> early_data) {
  const bool root = world.rank() == 0;
  const double run_start = wall_seconds();

  // Every rank reads the data itself; all must succeed before anyone goes on.
  std::unique_ptr<TrainingData> data;
  agree_or_stop(world, [&] { data = early_data.valid() ? early_data.get() : load_training_data(config); });
  agree_on_settings(world, data_identity(*data));  // node-local copies must hold the same data

  const Network network = build_network(config.model, config.filters, data->shape(), data->classes());
  const ParamLayout& layout = network.layout;
  OptimizerSettings optimizer;
  optimizer.kind = parse_optimizer(config.optimizer);
  optimizer.lr = static_cast<float>(config.lr);
  optimizer.momentum = static_cast<float>(config.momentum);
  optimizer.beta1 = static_cast<float>(config.beta1);
  optimizer.beta2 = static_cast<float>(config.beta2);
  optimizer.eps = static_cast<float>(config.eps);

  // Resume before anything is created or written: a refused or broken checkpoint changes nothing.
  agree_or_stop(world, [&] {
    if (root) check_trace_target(config.trace, config.out_dir);
  });
  const CheckpointConfig saved_config = checkpoint_config_for(config, network, data->train_count(), data->train_digest());
  const ResumePoint resume = resolve_resume(config, world, saved_config, layout);
  const CheckpointProgress& from = resume.state.progress;
  TrainSummary summary;
  if (resume.resumed && from.epoch >= config.epochs) {
    // SLURM requeue scripts run the same command again; a finished run must be a quiet success.
    if (root) std::printf("run already complete (epoch %lld of %d)\n", static_cast<long long>(from.epoch), config.epochs);
    summary.already_complete = true;
    return summary;
  }

  // Rank 0 owns the run directory from here to the end of train(): nothing is written before the claim.
  // Unwritable run or checkpoint directories are found now, not at the first save hours later.
  RunDirectory run_dir(config.out_dir);
  const RunLog log(config.out_dir);
  std::string run_id;
  agree_or_stop(world, [&] {
    if (!root) return;
    run_id = run_dir.claim(resume_request(config, resume));
    if (config.resume.empty()) log.prepare();
    else log.prepare_resume(from.epoch);
    CheckpointDir(config.out_dir).prepare();
    log.append_start(start_line(world.size(), resume, run_id));
  });
  const Checkpointer checkpointer(world, config, saved_config, layout, run_id);

  BackendOptions backend_options;
  backend_options.kind = parse_backend_kind(config.backend);
  // Until the knobs are gathered in one struct: CNN_CUDA_GRAPHS=0 queues each step eagerly, for A/B.
  if (const char* graphs = std::getenv("CNN_CUDA_GRAPHS")) backend_options.cuda_graphs = std::string(graphs) != "0";
  backend_options.threads = config.threads;
  backend_options.local_rank = world.local_rank();
  backend_options.optimizer = optimizer.kind;
  // comm is declared first so that it is destroyed last: ncclCommDestroy waits until every CUDA graph
  // that captured a collective of the communicator (the overlapped step's) has been destroyed.
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Backend> backend;
  agree_or_stop(world, [&] {
    backend = make_backend(backend_options, network);
    data->bind(*backend, world.rank(), world.size(), config.batch);
    comm = make_communicator(world, *backend, config.allreduce);
  });

  if (resume.resumed) {
    // resolve_resume gave every rank rank 0's reading, so all continue identical.
    backend->upload_params(resume.state.params);
    if (!resume.state.optimizer_state.empty()) backend->upload_optimizer_state(resume.state.optimizer_state);
  } else {
    // Rank 0 draws the initial parameters and every rank takes them, so all start identical.
    std::vector<float> params(static_cast<std::size_t>(layout.total()));
    if (root) initialize_params(params.data(), layout, config.seed);
    world.broadcast(params.data(), layout.total() * static_cast<std::int64_t>(sizeof(float)));
    backend->upload_params(params);
  }

  // Runs of 2+ ranks: the allreduce path and the overlap, measured and chosen by rank 0 for all.
  bool first_epoch_bound = false;  // the advisor bound the first epoch's order already
  GradientExchange exchange = choose_gradient_exchange(
      config, world, *backend, std::move(comm),
      [&] {  // the timed step takes the run's first batch, bound as the loop binds it (no second read)
        data->begin_epoch(*backend, Sampler(config.seed, data->train_count()).permutation(from.epoch),
                          from.step_in_epoch);
        first_epoch_bound = true;
        return data->step_batch(*backend, from.step_in_epoch,
                                global_batch_range(from.step_in_epoch, data->train_count(), config.batch));
      },
      layout.total(), config.out_dir);
  comm = std::move(exchange.comm);
  OverlapReducer* const overlap = exchange.overlap.get();

  if (root) {
    std::cout << "cnn_mpi " << CNN_VERSION << "\n" << describe(config) << "  model_detail: " << network.describe() << "\n"
              << "  train_images: " << data->train_count() << ", test_images: " << data->test_count() << "\n"
              << "  data_mode: " << data->mode() << "\n"
              << "  gradient allreduce: " << comm->name() << "\n" << exchange.report;
    std::cout.flush();
  }
  world.barrier();
  std::printf("rank %d/%d on %s: %s backend, %s\n", world.rank(), world.size(), world.host().c_str(),
              backend->name().c_str(), backend->device_description().c_str());
  std::fflush(stdout);
  world.barrier();

  const Sampler sampler(config.seed, data->train_count());
  const std::int64_t steps = batches_per_epoch(data->train_count(), config.batch);
  const StopAfterStepsHook stop_hook(world.rank());
  CheckpointProgress progress = from;
  // The resumed partial-epoch stats live in epoch_stats below; `progress` carries none to later saves.
  progress.epoch_loss_sum = 0.0;
  progress.epoch_correct = 0;
  progress.epoch_samples = 0;
  CheckpointMetrics last_metrics = resume.state.metrics;
  // The unfinished epoch's train stats: this rank's own since the last save, plus (on rank 0 only)
  // what the resumed checkpoint had summed over all ranks before the stop.
  BatchStats epoch_stats;
  if (root) epoch_stats = BatchStats{from.epoch_loss_sum, from.epoch_correct, from.epoch_samples};
  std::int64_t steps_run = 0;  // by this process, for the start-up line and the test hook
  PhaseTimes times;
  // The wall time of this epoch's steps (timing.csv's "step" row) and how many ran here (allreduce.csv).
  double step_seconds = 0.0;
  std::int64_t epoch_steps = 0;
  const std::int64_t gradient_bytes = layout.total() * static_cast<std::int64_t>(sizeof(float));
  ProgressLine live(root ? progress_mode_for_stdout(config.quiet) : ProgressMode::kOff, stdout, steps, config.epochs,
                    config.batch);
  std::unique_ptr<TraceRecorder> trace;
  if (!config.trace.empty()) {
    world.barrier();  // every rank takes its time origin on leaving it, so the ranks' tracks line up
    trace = std::make_unique<TraceRecorder>(parse_trace_window(config.trace_steps), wall_seconds());
  }

  // Mid-epoch saves carry the partial epoch's stats summed over ranks, so a resume logs the exact loss.
  DivergenceGuard divergence(parse_nonfinite_policy(config.on_nonfinite), layout, &world, world.rank());
  auto save_mid_epoch = [&] {
    divergence.settle(*backend);  // a step the device left unapplied stops the run before its checkpoint
    epoch_stats += divergence.take_train_stats(*backend);
    const BatchStats total = sum_over_ranks(world, epoch_stats);
    CheckpointProgress at = progress;
    at.epoch_loss_sum = total.loss_sum;
    at.epoch_correct = total.correct;
    at.epoch_samples = total.count;
    return checkpointer.save(*backend, at, last_metrics, times);
  };

  const Watchdog watchdog(config.stall_timeout, world.rank(), world.host());  // --stall-timeout, from here on
  for (std::int64_t epoch = from.epoch; epoch < config.epochs; ++epoch) {
    const std::int64_t first_step = epoch == from.epoch ? from.step_in_epoch : 0;
    heartbeat(WatchPhase::kData);
    // The order is a pure function of (seed, epoch): resumable mid-epoch.
    if (!(epoch == from.epoch && first_epoch_bound)) data->begin_epoch(*backend, sampler.permutation(epoch), first_step);
    world.barrier();
    const double epoch_start = wall_seconds();
    live.begin_epoch(epoch, first_step, epoch_start);
    for (std::int64_t step = first_step; step < steps; ++step) {
      // Stream mode re-binds the backend here when the step starts a new window of samples (after
      // the last step's deferred check, which may recompute that step on the old window).
      if (data->rebinds_before(step)) divergence.settle(*backend);
      const Range batch = data->step_batch(*backend, step, global_batch_range(step, data->train_count(), config.batch));
      if (steps_run == 0 && root) {
        std::printf("startup: %.3f s to first step\n", wall_seconds() - process_start);
        std::fflush(stdout);
      }
      // A traced step reads its own phases: take what came before it, and wait for its device work.
      const bool traced = trace && trace->recording(progress.global_step);
      if (traced) times += backend->take_phase_times();
      const PhaseTimes before = times;
      const double step_start = wall_seconds();
      optimizer.step = progress.global_step + 1;  // one update per step, counted over the whole run
      heartbeat_step(progress.global_step + 1);
      divergence.begin_step(*backend, progress.global_step);
      train_step(*backend, *comm, optimizer, layout.total(), batch, times, overlap, &divergence);
      heartbeat(WatchPhase::kStepEnd);
      if (traced) backend->synchronize();
      const double step_wall = wall_seconds() - step_start;
      step_seconds += step_wall;
      ++epoch_steps;
      if (traced) {
        times += backend->take_phase_times();
        PhaseTimes own = times;
        for (std::size_t p = 0; p < own.seconds.size(); ++p) own.seconds[p] -= before.seconds[p];
        trace->record_step(progress.global_step, step_start, step_wall, own);
      }
      ++steps_run;
      progress.step_in_epoch = step + 1;
      progress.global_step += 1;
      progress.samples_seen += batch.count;
      stop_hook.after_step(steps_run);
      // Every rank reaches the window's end at the same step: the gather is collective.
      if (trace && trace->window_done(progress.global_step)) trace->gather_and_write(world, config.trace);
      live.update(step + 1, wall_seconds());
      if (step + 1 == steps) break;  // the epoch's end below saves and stops, with the epoch's metrics
      // One int allreduce per step: a signal on any rank stops all at the same step (cost: CHECKPOINT.md).
      if (const int signo = agree_on_stop(world)) {
        stop_for_signal(world, signo, epoch + 1, step + 1, save_mid_epoch());
      }
      if (checkpointer.due_after_step(progress.global_step)) save_mid_epoch();
    }
    const double sync_start = wall_seconds();
    divergence.settle(*backend);  // the epoch's last step, before its stats, evaluation and checkpoint
    backend->synchronize();  // device work queued by the steps is step time too
    heartbeat(WatchPhase::kStepEnd);
    step_seconds += wall_seconds() - sync_start;
    const double epoch_seconds = world.allreduce_max(wall_seconds() - epoch_start);
    live.end_epoch();
    const RankSpread step_spread = reduce_over_ranks(world, step_seconds);
    const std::int64_t allreduce_count = epoch_steps;
    step_seconds = 0.0;
    epoch_steps = 0;

    epoch_stats += divergence.take_train_stats(*backend);
    const BatchStats train_stats = sum_over_ranks(world, epoch_stats);
    epoch_stats = BatchStats{};
    const double train_loss = train_stats.loss_sum / static_cast<double>(train_stats.count);
    check_epoch_loss(world, epoch + 1, train_loss);  // every rank holds the same value

    const double eval_start = wall_seconds();
    const BatchStats test = evaluate_test_set(*backend, world, data->test_count(), data->test_held_from());
    // Shown in the trace after the epoch's last step when that step is in the window.
    if (trace)
      trace->record(progress.global_step - 1, static_cast<int>(Phase::kEval), eval_start, wall_seconds() - eval_start);
    times += backend->take_phase_times();

    EpochMetrics metrics;
    metrics.epoch = epoch + 1;
    metrics.train_loss = train_loss;
    metrics.test_loss = test.loss_sum / static_cast<double>(test.count);
    metrics.test_accuracy = static_cast<double>(test.correct) / static_cast<double>(test.count);
    metrics.epoch_seconds = epoch_seconds;
    metrics.images_per_second = static_cast<double>(data->train_count()) / epoch_seconds;
    metrics.wall_seconds = wall_seconds() - run_start;
    metrics.skipped_steps = divergence.take_skipped();
    const std::vector<PhaseSpread> phases = reduce_phases(world, times);
    const AsyncAllreduceTimes overlap_times = mean_over_ranks(world, comm->take_async_times());
    times = PhaseTimes{};  // the epoch-end checkpoint below is counted in the next epoch's row
    // The row is written before the checkpoint: a resume from an older checkpoint drops later rows,
    // while a row missing after its checkpoint could never be recovered.
    if (root) {
      heartbeat(WatchPhase::kLog);
      log.append_epoch(metrics, phases, step_spread);
      if (world.size() > 1) {
        AllreduceStats stats = allreduce_stats(metrics.epoch, world.size(), gradient_bytes, allreduce_count,
                                               phases[static_cast<std::size_t>(Phase::kAllreduce)].mean);
        if (overlap) stats = with_overlap(stats, overlap_times, static_cast<int>(overlap->plan().buckets.size()));
        log.append_allreduce(stats);
      }
      if (!config.quiet || epoch + 1 == config.epochs) {
        std::printf("epoch %lld/%d  train_loss %.4f  test_loss %.4f  test_acc %s  images/s %.0f  epoch %.2fs\n",
                    static_cast<long long>(epoch + 1), config.epochs, metrics.train_loss, metrics.test_loss,
                    percent(metrics.test_accuracy).c_str(), metrics.images_per_second, epoch_seconds);
        std::fflush(stdout);
      }
    }
    last_metrics = CheckpointMetrics{metrics.train_loss, metrics.test_loss, metrics.test_accuracy};
    progress.epoch = epoch + 1;
    progress.step_in_epoch = 0;

    const int signo = agree_on_stop(world);  // also catches a signal that came during the evaluation
    std::string path;
    if (signo != 0 || checkpointer.due_after_epoch(progress.epoch, progress.global_step))
      path = checkpointer.save(*backend, progress, last_metrics, times);
    // A signal after the last epoch changes nothing: the run is complete and says so with exit 0.
    if (signo != 0 && progress.epoch < config.epochs) stop_for_signal(world, signo, epoch + 1, steps, path);

    summary.final_test_accuracy = metrics.test_accuracy;
    summary.final_test_loss = metrics.test_loss;
    summary.final_train_loss = metrics.train_loss;
  }
  if (trace) trace->gather_and_write(world, config.trace);  // a window past the run's end: what was recorded
  if (const std::string report = data->read_report(); !report.empty()) {
    std::printf("%s\n", report.c_str());
    std::fflush(stdout);
  }
  if (root && divergence.policy() == NonFinitePolicy::kSkip)
    std::printf("skipped_steps: %lld (non-finite gradients, --on-nonfinite skip)\n",
                static_cast<long long>(divergence.skipped_total()));
  summary.params = backend->download_params();
  return summary;
}

}  // namespace cnn
