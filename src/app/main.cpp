// cnn_mpi: the entry point. Runs under mpirun/srun or alone (a world of one rank).
// Exit codes are cnn::ExitCode (README.md, "Exit codes").
#include <cstdio>
#include <exception>
#include <future>
#include <iostream>

#include "cnn/cli.hpp"
#include "cnn/collective_errors.hpp"
#include "cnn/communicator.hpp"
#include "cnn/evaluate_command.hpp"
#include "cnn/launch_agreement.hpp"
#include "cnn/launch_environment.hpp"
#include "cnn/predict_command.hpp"
#include "cnn/phase_times.hpp"
#include "cnn/run_options.hpp"
#include "cnn/signals.hpp"
#include "cnn/test_hooks.hpp"
#include "cnn/trainer.hpp"

#ifdef CNN_HAVE_CUDA
#include "cnn/cuda_backend.hpp"
#endif

namespace {

// Usable CUDA devices on this node; -1 in a build without CUDA.
int usable_gpus() {
#ifdef CNN_HAVE_CUDA
  return cnn::cuda_device_count();
#else
  return -1;
#endif
}

// What can happen before MPI_Init: parsing argv (the same on every rank) and, for training on IDX or
// CIFAR data, reading the data set on a second thread while MPI starts up (both take ~0.4 s; see the
// "startup:" line).
struct EarlyStart {
  cnn::CliResult cli;
  cnn::TestHooks hooks;                // read once, here, from the environment (test_hooks.hpp)
  cnn::LaunchEnvironment launch;       // what the launcher meant the world to be, before MPI_Init adds to it
  std::string usage_error;             // set when argv is bad; reported once MPI tells who is rank 0
  cnn::ExitCode usage_error_code = cnn::ExitCode::kUsage;  // kIo: a --config file that cannot be read
  std::future<std::unique_ptr<cnn::TrainingData>> data;   // valid for `train`
};

EarlyStart start_before_mpi(int argc, char** argv) {
  EarlyStart early;
  early.launch = cnn::read_launch_environment();
  early.hooks = cnn::read_test_hooks_from_environment();
  cnn::install_write_test_hooks(early.hooks);
  try {
    early.cli = cnn::parse_command_line(argc, argv);
  } catch (const cnn::Error& e) {  // UsageError; IoError for a --config file that cannot be read
    early.usage_error = e.what();
    early.usage_error_code = e.code();
    return early;
  }
  early.cli.config.knobs = cnn::read_knobs_from_environment();  // the live knobs, read once (knobs.hpp)
  // The early thread must not read the environment: MPI_Init setenv()s dozens of variables (OMPI_*,
  // PMIX_*), and glibc's getenv on another thread can then follow the freed array and crash (it did, in
  // CI). libhdf5 reads HDF5_* variables in H5open and in every H5Fopen, so HDF5 data loads after
  // MPI_Init; the IDX, gzip and CIFAR readers read none (tests/startup_environment_test.sh watches).
  if (!early.cli.exit_now && early.cli.config.command == cnn::Command::kTrain &&
      early.cli.config.dataset != cnn::DatasetKind::kHdf5) {
    // Errors travel through the future and surface inside train()'s agree_or_stop.
    early.data = std::async(std::launch::async,
                            [options = cnn::data_options(early.cli.config)] { return cnn::load_training_data(options); });
  }
  return early;
}

int run(EarlyStart& early, const cnn::MpiWorld& world, double process_start) {
  // Again after MPI_Init, so that ours replace whatever the MPI library installed for these signals.
  cnn::install_stop_handlers();
  // First, before any output: N processes that MPI made N worlds of one would all write one run
  // directory. Each is alone, so each stops with its own line (launch_environment.hpp).
  cnn::refuse_lone_rank(early.launch, world.size());
  // Ranks may have parsed different command lines (an MPMD launch, a per-node wrapper): the verdict on
  // argv is collective, and so is what each rank is about to do, before any other collective.
  cnn::agree_or_stop(world, [&] {
    if (early.usage_error.empty()) return;
    if (early.usage_error_code != cnn::ExitCode::kUsage) throw cnn::Error(early.usage_error_code, early.usage_error);
    throw cnn::UsageError(early.usage_error + " (see --help)");
  });
  const cnn::CliResult& cli = early.cli;
  cnn::agree_on_settings(world, {{"the command", cli.exit_now ? "--help or --version" : "train, eval or predict"}});
  if (cli.exit_now) {
    if (world.rank() == 0) std::cout << cli.text << std::flush;
    return *cli.exit_now;
  }
  cnn::TrainConfig config = cli.config;
  cnn::agree_or_stop(world, [&] {
    cnn::resolve_config(config, world.size(), world.local_size(), usable_gpus());
  });
  cnn::agree_on_settings(world, cnn::settings_that_must_agree(config));
  // Rank 0 chose the default run directory name from its clock; all ranks use rank 0's.
  config.out_dir = world.broadcast_string(config.out_dir);
  if (config.command == cnn::Command::kEval) return cnn::evaluate_checkpoint_command(config, world);
  if (config.command == cnn::Command::kPredict) return cnn::predict_command(config, world, early.hooks);
  cnn::train(config, world, early.hooks, process_start, std::move(early.data));
  return static_cast<int>(cnn::ExitCode::kOk);
}

}  // namespace

int main(int argc, char** argv) {
  const double process_start = cnn::wall_seconds();
  // First of all: a SIGUSR1 or SIGTERM that comes while the data loads and MPI starts (seconds on a
  // busy node) must become a stop request, not a death without a word.
  try {
    cnn::install_stop_handlers();
  } catch (const cnn::Error& e) {
    cnn::print_error_line(e.what());
    return static_cast<int>(e.code());
  }
  EarlyStart early = start_before_mpi(argc, argv);
  std::unique_ptr<cnn::MpiWorld> world;
  try {
    world = std::make_unique<cnn::MpiWorld>(&argc, &argv);
  } catch (const std::exception& e) {
    cnn::print_error_line(e.what());
    return static_cast<int>(cnn::ExitCode::kFailure);
  }
  int code = 0;
  try {
    code = run(early, *world, process_start);
  } catch (const cnn::AlreadyReported& e) {
    code = static_cast<int>(e.code());
  } catch (const cnn::Error& e) {
    // Seen by this rank alone: the others may be waiting in a collective, so stop them all.
    cnn::print_error_line(std::string(e.what()) + " [" + cnn::where_am_i() + "]");
    if (world->size() > 1) world->abort(static_cast<int>(e.code()));
    code = static_cast<int>(e.code());
  } catch (const std::exception& e) {
    cnn::print_error_line(std::string("internal error: ") + e.what() + " [" + cnn::where_am_i() + "]");
    if (world->size() > 1) world->abort(static_cast<int>(cnn::ExitCode::kFailure));
    code = static_cast<int>(cnn::ExitCode::kFailure);
  }
  world.reset();
  return code;
}
