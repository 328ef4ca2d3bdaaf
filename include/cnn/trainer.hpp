// The training loop. It reads like the algorithm:
//   for each epoch: global permutation -> for each global batch: train_step -> evaluate -> log
//   -> checkpoint when due; a stop signal seen by any rank ends it at a step boundary, with a checkpoint.
#pragma once

#include <future>
#include <vector>

#include "cnn/communicator.hpp"
#include "cnn/config.hpp"
#include "cnn/test_hooks.hpp"
#include "cnn/training_data.hpp"

namespace cnn {

struct TrainSummary {
  double final_test_accuracy = 0.0;
  double final_test_loss = 0.0;
  double final_train_loss = 0.0;
  bool already_complete = false;  // --resume found a checkpoint covering all --epochs: nothing trained
  std::vector<float> params;      // final parameters (host copy)
};

// Runs `config` (already resolved) on this rank: set_up_run (run_setup.hpp), then for each epoch and
// step data -> step (gradients, exchange, check, update), or a chunk of whole steps in one backend call
// (--steps-per-launch, chunk_plan.hpp), with checkpoints and the logs at their points;
// timing, trace, progress, heartbeats and the run log observe the loop (training_observer.hpp).
// `process_start` is wall_seconds() at the top of main(), for the "startup: X s to first step" line.
// `hooks`: the tests' hooks, read once by main. `data` is load_training_data() started early, or an
// empty future to load here. Throws cnn::Error subclasses on failures, and
// AlreadyReported(kStoppedBySignal) after a stop signal's checkpoint.
TrainSummary train(const TrainConfig& config, const MpiWorld& world, const TestHooks& hooks, double process_start,
                   std::future<std::unique_ptr<TrainingData>> data = {});

}  // namespace cnn
