// The optimizer's and the learning-rate schedule's options beyond the basic ones (--lr-schedule,
// --warmup-steps, --weight-decay, --nesterov, --label-smoothing; docs/TRAINING.md): their checks, the
// combinations that mean nothing refused in one line each, and their lines of the settings block.
// Kept beside cli.cpp so that the command line's file stays one page of registrations. Private to src/.
#pragma once

#include <string>

#include "cnn/config.hpp"

namespace cnn {

// Parses lr_schedule_text into config.lr_schedule and checks the options above against each other and
// the optimizer (validate() in cli.cpp has set config.optimizer). Throws UsageError, one line.
void validate_optimizer_options(TrainConfig& config, const std::string& lr_schedule_text);

// "  lr_schedule: ...\n" and the other settings-block lines of these options (describe(), config.hpp).
std::string describe_optimizer_options(const TrainConfig& config);

}  // namespace cnn
