// `cnn_mpi predict --checkpoint PATH --out FILE.csv [--data DIR --dataset NAME --split test|train]`:
// one CSV row per image of a split (index, label when known, predicted class, class probabilities),
// on any number of ranks, rank 0 writing the file. docs/PREDICT.md.
#pragma once

#include "cnn/communicator.hpp"
#include "cnn/config.hpp"
#include "cnn/test_hooks.hpp"

namespace cnn {

// Refuses an existing --out before any work; writes the file whole or not at all (prediction_file.hpp);
// prints one summary line on rank 0 (stderr when the CSV goes to standard output). Returns the exit
// code (0). Bad input throws AlreadyReported (message printed once). hooks: predict_block.
int predict_command(const TrainConfig& config, const MpiWorld& world, const TestHooks& hooks);

}  // namespace cnn
