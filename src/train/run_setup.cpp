#include "cnn/run_setup.hpp"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "cnn/augment.hpp"
#include "cnn/collective_errors.hpp"
#include "cnn/errors.hpp"
#include "cnn/launch_agreement.hpp"
#include "cnn/placement.hpp"
#include "cnn/run_options.hpp"
#include "cnn/run_settings_file.hpp"
#include "cnn/sampler.hpp"
#include "cnn/scaling_advisor.hpp"
#include "cnn/settings_toml.hpp"
#include "cnn/step_path_advisor.hpp"
#include "cnn/train_step.hpp"
#include "cnn/utc_time.hpp"

namespace cnn {
namespace {

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

// Rank 0 owns the run directory from here to the end of the run: nothing is written before the
// claim. Unwritable run or checkpoint directories are found now, not at the first save hours later.
std::string claim_run_directory(const TrainConfig& config, const MpiWorld& world, TrainingRun& run) {
  run.run_dir = std::make_unique<RunDirectory>(config.out_dir);
  run.log = std::make_unique<RunLog>(config.out_dir);
  std::string run_id;
  agree_or_stop(world, [&] {
    if (world.rank() != 0) return;
    run_id = run.run_dir->claim(resume_request(config, run.resume));
    if (config.resume.empty()) run.log->prepare();
    else run.log->prepare_resume(run.resume.state.progress.epoch);
    CheckpointDir(config.out_dir).prepare();
    run.log->append_start(start_line(world.size(), run.resume, run_id));
    // What this start resolved, for `--config RUN_DIR/config.toml` (config.resume-N.toml on a resume).
    write_run_settings(config.out_dir, settings_toml(config, settings_toml_header(run_id, world.size(),
                                                                                 run.resume.resumed ? run.resume.path : "")));
  });
  return run_id;
}

// The resumed parameters (every rank has rank 0's reading), or rank 0's initial draw for all.
void set_starting_parameters(const TrainConfig& config, const MpiWorld& world, TrainingRun& run) {
  if (run.resume.resumed) {
    run.backend->upload_params(run.resume.state.params);
    if (!run.resume.state.optimizer_state.empty()) run.backend->upload_optimizer_state(run.resume.state.optimizer_state);
    if (run.network.state_count > 0) {
      if (static_cast<std::int64_t>(run.resume.state.bn_running.size()) != run.network.state_count)
        throw InputError(run.resume.path + ": /state/bn_running holds " + std::to_string(run.resume.state.bn_running.size()) +
                         " values, but the network's bn layers keep " + std::to_string(run.network.state_count));
      run.backend->upload_state(run.resume.state.bn_running);
    }
    return;
  }
  const ParamLayout& layout = run.network.layout;
  std::vector<float> params(static_cast<std::size_t>(layout.total()));
  if (world.rank() == 0) initialize_params(params.data(), layout, config.seed);
  world.broadcast(params.data(), layout.total() * static_cast<std::int64_t>(sizeof(float)));
  run.backend->upload_params(params);
}

// Binds the first epoch to run, and its first step's data, which the scaling advisor times steps on
// (no second read: the loop goes on from there).
Range bind_first_step(const TrainConfig& config, TrainingRun& run) {
  const CheckpointProgress& from = run.resume.state.progress;
  TrainingData& data = *run.data;
  apply_binding(*run.backend,
                data.begin_epoch(Sampler(config.seed, data.train_count()).permutation(from.epoch), from.step_in_epoch));
  const StepData first =
      data.step_batch(from.step_in_epoch, global_batch_range(from.step_in_epoch, data.train_count(), config.batch));
  apply_binding(*run.backend, first.rebind);
  return first.batch;
}

// --steps-per-launch for this run, its data and its backend (chunk_plan.hpp). Collective: every rank
// gets the same plan. With auto, where chunks could run, both paths are timed from the run's first
// step (step_path_advisor.hpp; the backend is bound to it) and the faster one is taken.
ChunkPlan plan_step_chunks(const TrainConfig& config, const MpiWorld& world, const TrainingRun& run) {
  ChunkConditions conditions;
  conditions.steps_per_launch = config.steps_per_launch;
  conditions.steps_per_epoch = batches_per_epoch(run.data->train_count(), config.batch);
  conditions.ranks = world.size();
  conditions.on_nonfinite = config.on_nonfinite;
  conditions.stream = run.data->mode() != "memory";
  conditions.trace = !config.trace.empty();
  // This rank's slices of the global batch and of the epoch's short last one.
  const std::int64_t last_batch = run.data->train_count() % config.batch;
  for (const std::int64_t batch : {config.batch, last_batch}) {
    const Range mine = rank_slice(Range{0, batch}, world.rank(), world.size());
    if (batch > 0 && conditions.kernel_unsupported.empty())
      conditions.kernel_unsupported = run.backend->persistent_steps_unsupported(mine.count);
  }
  // A slice one rank's kernel cannot run keeps every rank on one step per call.
  if (world.size() > 1 && world.allreduce_max(conditions.kernel_unsupported.empty() ? 0 : 1) != 0 &&
      conditions.kernel_unsupported.empty())
    conditions.kernel_unsupported = "another rank's slice of the batch does not fit its persistent kernel";
  // The in-kernel exchange's set-up (collective), only where the run could take chunks at all.
  if (world.size() > 1 && conditions.kernel_unsupported.empty() && config.steps_per_launch != 1 &&
      conditions.on_nonfinite == NonFinitePolicy::kStop && !conditions.stream && !conditions.trace)
    conditions.exchange_unsupported = run.backend->prepare_chunk_exchange(world);
  const ChunkPlan plan = plan_chunks(conditions);
  if (config.steps_per_launch != 0 || !plan.chunked()) return plan;  // an explicit N never measures
  // A resume takes the path its checkpoint recorded: measuring anew could take the other one, whose
  // sums run in other orders, and the resumed run would no longer repeat the uninterrupted one.
  if (run.resume.resumed && !run.resume.state.config.step_path.empty()) {
    conditions.resumed_path = run.resume.state.config.step_path;
    return plan_chunks(conditions);
  }
  StepPathRun measured;
  measured.world = &world;
  measured.backend = run.backend.get();
  measured.comm = run.comm.get();
  measured.overlap = run.overlap.get();
  measured.optimizer = run.optimizer;
  measured.learning_rate = &*run.learning_rate;
  measured.seed = config.seed;
  measured.param_count = run.network.layout.total();
  measured.train_count = run.data->train_count();
  measured.batch = config.batch;
  measured.step_in_epoch = run.resume.state.progress.step_in_epoch;
  measured.global_step = run.resume.state.progress.global_step;
  conditions.measured = measure_step_paths(measured);
  return plan_chunks(conditions);
}

void print_settings(const TrainConfig& config, const MpiWorld& world, const TrainingRun& run,
                    const std::string& exchange_report) {
  if (world.rank() == 0) {
    char work[64];
    std::snprintf(work, sizeof(work), "%.4g", run.network.flops_per_image() / 1e6);
    std::cout << "cnn_mpi " << CNN_VERSION << "\n" << describe(config) << "  model_detail: " << run.network.describe()
              << "\n"
              << "  model_work: " << work << " MFLOP per training image (forward and backward)\n"
              << "  train_images: " << run.data->train_count() << ", test_images: " << run.data->test_count() << "\n"
              << "  data_mode: " << run.data->mode() << "\n"
              << "  gradient allreduce: " << run.comm->name() << "\n" << exchange_report
              << "  steps_per_launch: " << run.chunks.describe << "\n";
    if (run.network.has_batch_norm()) {
      std::cout << "  bn_statistics: "
                << (config.bn_local ? "each rank's own batch slice (--bn-local)"
                    : world.size() > 1 ? "the global batch (per-channel sums allreduced inside each step)"
                                       : "the global batch (one rank)")
                << "\n";
      // How the sums travel where the backend has a say (cuda: inside the step's graph, or eager steps).
      const std::string exchange = run.backend->statistics_exchange();
      if (!exchange.empty()) std::cout << "  bn_exchange: " << exchange << "\n";
    }
    // Rank 0's share of a global batch: every rank's ops run the same kernels, tiled for its share.
    const Range share = rank_slice(Range{0, config.batch}, 0, world.size());
    const std::vector<std::string> kernels = run.backend->implementation_lines(share.count);
    if (!kernels.empty()) {
      std::cout << "  kernels (" << precision_name(config.precision) << ", rank 0's " << share.count
                << " samples per step):\n";
      for (const std::string& line : kernels) std::cout << "    " << line << "\n";
    }
    std::cout.flush();
  }
  world.barrier();
  // Where each rank landed: its node, its place among that node's ranks (which picks its GPU) and the
  // CPUs its launcher bound it to (placement.hpp).
  std::printf("rank %d/%d on %s (local rank %d of %d, %s): %s backend, %s\n", world.rank(), world.size(),
              world.host().c_str(), world.local_rank(), world.local_size(), affinity_text().c_str(),
              run.backend->name().c_str(), run.backend->device_description().c_str());
  std::fflush(stdout);
  world.barrier();
}

}  // namespace

std::unique_ptr<TrainingRun> set_up_run(const TrainConfig& config, const MpiWorld& world,
                                        std::future<std::unique_ptr<TrainingData>> early_data) {
  auto run = std::make_unique<TrainingRun>();
  // Every rank reads the data itself; all must succeed before anyone goes on.
  agree_or_stop(world, [&] { run->data = early_data.valid() ? early_data.get() : load_training_data(data_options(config)); });
  agree_on_settings(world, data_identity(*run->data));  // node-local copies must hold the same data
  run->network = build_network(config.model, config.filters, run->data->shape(), run->data->classes());
  check_augment_fits(config.augment, run->data->shape().height, run->data->shape().width);
  run->optimizer = optimizer_settings(config);
  run->learning_rate = learning_rate(config, run->data->train_count());
  // Global bn statistics make every rank take part in every step's sums: a short last batch with fewer
  // samples than ranks would leave a rank out of them.
  const std::int64_t last_batch = run->data->train_count() % config.batch;
  agree_or_stop(world, [&] {  // the same on every rank: one line, from the lowest
    if (run->network.has_batch_norm() && !config.bn_local && last_batch > 0 && last_batch < world.size())
      throw UsageError("--model has bn layers with global statistics, but the epoch's last batch of " +
                     std::to_string(last_batch) + " images leaves some of the " + std::to_string(world.size()) +
                     " ranks without a sample; change --batch or --train-samples, or give --bn-local");
  });

  // Resume before anything is created or written: a refused or broken checkpoint changes nothing.
  agree_or_stop(world, [&] {
    if (world.rank() == 0) check_trace_target(config.trace, config.out_dir);
  });
  const CheckpointConfig saved_config =
      checkpoint_config_for(config, run->network, run->data->train_count(), run->data->train_digest());
  run->resume = resolve_resume(resume_options(config), world, saved_config, run->network.layout);
  const CheckpointProgress& from = run->resume.state.progress;
  if (run->resume.resumed && from.epoch >= config.epochs) {
    // SLURM requeue scripts run the same command again; a finished run must be a quiet success.
    if (world.rank() == 0)
      std::printf("run already complete (epoch %lld of %d)\n", static_cast<long long>(from.epoch), config.epochs);
    return nullptr;
  }

  const std::string run_id = claim_run_directory(config, world, *run);
  run->checkpointer =
      std::make_unique<Checkpointer>(world, checkpointer_options(config), saved_config, run->network.layout, run_id);
  agree_or_stop(world, [&] {
    run->backend = make_backend(backend_options(config, world.local_rank()), run->network);
    apply_binding(*run->backend, run->data->attach(world.rank(), world.size(), config.batch));
    run->comm = make_communicator(world, *run->backend, config.allreduce, config.knobs.peer_blocks);
  });
  set_starting_parameters(config, world, *run);

  // Runs of 2+ ranks: the allreduce path and the overlap, measured and chosen by rank 0 for all. Its
  // timed steps move bn's running statistics: they are put back.
  const Range first_batch = bind_first_step(config, *run);
  const std::vector<float> bn_running = run->backend->download_state();
  GradientExchange exchange = choose_gradient_exchange(exchange_options(config), world, *run->backend,
                                                       std::move(run->comm), first_batch, run->network.layout.total());
  run->comm = std::move(exchange.comm);
  run->backend->upload_state(bn_running);
  // bn's statistics over the global batch: each step adds the ranks' sums (--bn-local: each its own).
  if (run->network.has_batch_norm() && !config.bn_local && world.size() > 1)
    run->backend->set_statistics_communicator(run->comm.get());
  run->overlap = std::move(exchange.overlap);
  run->chunks = plan_step_chunks(config, world, *run);
  run->checkpointer->record_step_path(run->chunks.step_path);
  print_settings(config, world, *run, exchange.report);
  return run;
}

}  // namespace cnn
