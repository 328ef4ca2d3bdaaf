// Each part of a run gets the options it uses, not the whole TrainConfig: these adapters are the one
// place that knows which fields of the configuration each part reads.
#pragma once

#include <cstdint>

#include "cnn/backend.hpp"
#include "cnn/checkpoint.hpp"
#include "cnn/checkpointer.hpp"
#include "cnn/config.hpp"
#include "cnn/lr_schedule.hpp"
#include "cnn/network.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/resume.hpp"
#include "cnn/scaling_advisor.hpp"
#include "cnn/training_data.hpp"

namespace cnn {

DataOptions data_options(const TrainConfig& config);
ResumeOptions resume_options(const TrainConfig& config);
CheckpointerOptions checkpointer_options(const TrainConfig& config);
ExchangeOptions exchange_options(const TrainConfig& config);
// `local_rank` picks the GPU.
BackendOptions backend_options(const TrainConfig& config, int local_rank);
// The update's settings, as the float values the backends use (the CLI checked them as floats); the
// lr and the step are set before each update (trainer.cpp).
OptimizerSettings optimizer_settings(const TrainConfig& config);
// The run's total number of updates: --epochs times the steps of an epoch over train_samples images.
std::int64_t total_steps(const TrainConfig& config, std::int64_t train_samples);
// The lr of every step of the run (--lr, --lr-schedule, --warmup-steps), over train_samples images an epoch.
LearningRate learning_rate(const TrainConfig& config, std::int64_t train_samples);

// What this run writes into a checkpoint's /config, and compares with a resumed one's: the option
// texts as they were given (optimizer and data set by name), the network's spec, and the training
// data identified by its sample count and digest (TrainingData::train_digest()).
CheckpointConfig checkpoint_config_for(const TrainConfig& config, const Network& network, std::int64_t train_samples,
                                       std::uint64_t data_digest);

}  // namespace cnn
