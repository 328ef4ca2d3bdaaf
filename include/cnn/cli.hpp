// The command line: long options through CLI11, checked, resolved into a TrainConfig.
#pragma once

#include <optional>
#include <string>

#include "cnn/config.hpp"
#include "cnn/config_file.hpp"

namespace cnn {

struct CliResult {
  TrainConfig config;
  std::optional<int> exit_now;  // set for --help / --version (0)
  std::string text;             // what --help / --version print
  std::vector<LongOption> options;  // every long option a config file may set (config_file.hpp)
};

// Parses and validates argv. Throws UsageError with one line for any bad value. Checks that need
// the world size (a global batch smaller than the number of ranks) happen in resolve_config().
CliResult parse_command_line(int argc, char** argv);

// Fills what depends on the run's environment: the world size, --threads (SLURM_CPUS_PER_TASK, then
// OMP_NUM_THREADS, then the cores this rank may use), --device auto, the backend and the output
// directory name. `gpus` is the number of usable CUDA devices (0 without CUDA).
void resolve_config(TrainConfig& config, int world_size, int local_size, int gpus);

}  // namespace cnn
