// `cnn_mpi eval --checkpoint PATH [--data DIR --dataset NAME --test-samples N]`: the test-set loss
// and accuracy of a saved model, on one rank or split over many.
#pragma once

#include "cnn/communicator.hpp"
#include "cnn/config.hpp"

namespace cnn {

// Prints "eval: PATH (epoch E, step S)" and "test_loss L  test_acc A%  (N images)" on rank 0 and
// returns the exit code (0). A bad checkpoint or data throws AlreadyReported (message printed once).
int evaluate_checkpoint_command(const TrainConfig& config, const MpiWorld& world);

}  // namespace cnn
