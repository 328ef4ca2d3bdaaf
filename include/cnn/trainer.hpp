// The training loop. It reads like the algorithm:
//   for each epoch: global permutation -> for each global batch: train_step -> evaluate -> log.
#pragma once

#include <vector>

#include "cnn/communicator.hpp"
#include "cnn/config.hpp"

namespace cnn {

struct TrainSummary {
  double final_test_accuracy = 0.0;
  double final_test_loss = 0.0;
  double final_train_loss = 0.0;
  std::vector<float> params;  // final parameters (host copy)
};

// Runs `config` (already resolved) on this rank. Throws cnn::Error subclasses on failures.
TrainSummary train(const TrainConfig& config, const MpiWorld& world);

}  // namespace cnn
