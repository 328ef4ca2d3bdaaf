// cnn_mpi: the entry point. Runs under mpirun/srun or alone (a world of one rank).
// Exit codes are cnn::ExitCode (README.md, "Exit codes").
#include <cstdio>
#include <exception>
#include <iostream>

#include "cnn/cli.hpp"
#include "cnn/collective_errors.hpp"
#include "cnn/communicator.hpp"
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

int run(int argc, char** argv, const cnn::MpiWorld& world) {
  // Every rank parses the same argv, so every rank reaches the same verdict; rank 0 speaks.
  cnn::CliResult cli;
  try {
    cli = cnn::parse_command_line(argc, argv);
  } catch (const cnn::UsageError& e) {
    if (world.rank() == 0) cnn::print_error_line(std::string(e.what()) + " (see --help)");
    return static_cast<int>(cnn::ExitCode::kUsage);
  }
  if (cli.exit_now) {
    if (world.rank() == 0) std::cout << cli.text << std::flush;
    return *cli.exit_now;
  }
  cnn::TrainConfig config = cli.config;
  cnn::agree_or_stop(world, [&] {
    cnn::resolve_config(config, world.size(), world.local_size(), usable_gpus());
  });
  // Rank 0 chose the default run directory name from its clock; all ranks use rank 0's.
  config.out_dir = world.broadcast_string(config.out_dir);
  cnn::train(config, world);
  return static_cast<int>(cnn::ExitCode::kOk);
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<cnn::MpiWorld> world;
  try {
    world = std::make_unique<cnn::MpiWorld>(&argc, &argv);
  } catch (const std::exception& e) {
    cnn::print_error_line(e.what());
    return static_cast<int>(cnn::ExitCode::kFailure);
  }
  int code = 0;
  try {
    code = run(argc, argv, *world);
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
