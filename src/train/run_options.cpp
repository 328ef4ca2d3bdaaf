#include "cnn/run_options.hpp"

#include "cnn/sampler.hpp"

namespace cnn {

DataOptions data_options(const TrainConfig& config) {
  DataOptions o;
  o.dir = config.data_dir;
  o.dataset = config.dataset;
  o.train_samples = config.train_samples;
  o.test_samples = config.test_samples;
  o.mode = config.data_mode;
  o.stream_window_mb = config.stream_window_mb;
  o.h5 = H5ImagePaths{config.h5_images, config.h5_labels};
  return o;
}

ResumeOptions resume_options(const TrainConfig& config) { return {config.resume, config.out_dir}; }

CheckpointerOptions checkpointer_options(const TrainConfig& config) {
  CheckpointerOptions o;
  o.run_dir = config.out_dir;
  o.every_epochs = config.checkpoint_every;
  o.every_steps = config.checkpoint_every_steps;
  o.epochs = config.epochs;
  o.keep = config.keep;
  o.verbose = !config.quiet;
  return o;
}

ExchangeOptions exchange_options(const TrainConfig& config) {
  ExchangeOptions o;
  o.allreduce = config.allreduce;
  o.overlap = config.overlap;
  o.overlap_cuts = config.knobs.overlap_cuts;
  o.peer_blocks = config.knobs.peer_blocks;
  o.run_dir = config.out_dir;
  return o;
}

BackendOptions backend_options(const TrainConfig& config, int local_rank) {
  BackendOptions o;
  o.kind = config.backend.value_or(BackendKind::kThreads);  // resolve_config has set it
  if (config.knobs.cuda_graphs) o.cuda_graphs = *config.knobs.cuda_graphs;
  o.threads = config.threads;
  o.local_rank = local_rank;
  o.optimizer = config.optimizer;
  o.precision = config.precision;
  o.label_smoothing = static_cast<float>(config.label_smoothing);
  o.augment = config.augment;
  return o;
}

OptimizerSettings optimizer_settings(const TrainConfig& config) {
  OptimizerSettings o;
  o.kind = config.optimizer;
  o.lr = static_cast<float>(config.lr);
  o.momentum = static_cast<float>(config.momentum);
  o.beta1 = config.beta1;  // doubles: adam_step derives its constants from them and rounds once
  o.beta2 = config.beta2;
  o.eps = config.eps;
  o.weight_decay = static_cast<float>(config.weight_decay);
  o.nesterov = config.nesterov;
  return o;
}

std::int64_t total_steps(const TrainConfig& config, std::int64_t train_samples) {
  return static_cast<std::int64_t>(config.epochs) * batches_per_epoch(train_samples, config.batch);
}

LearningRate learning_rate(const TrainConfig& config, std::int64_t train_samples) {
  return LearningRate(config.lr, config.lr_schedule, config.warmup_steps, batches_per_epoch(train_samples, config.batch),
                      total_steps(config, train_samples));
}

CheckpointConfig checkpoint_config_for(const TrainConfig& config, const Network& network, std::int64_t train_samples,
                                       std::uint64_t data_digest) {
  CheckpointConfig c;
  c.model = config.model;
  c.spec = network.spec;
  c.filters = config.filters;
  c.input = network.input;
  c.classes = network.classes;
  c.global_batch = config.batch;
  c.lr = config.lr;
  c.optimizer = optimizer_name(config.optimizer);
  c.momentum = config.momentum;
  c.beta1 = config.beta1;
  c.beta2 = config.beta2;
  c.eps = config.eps;
  c.seed = config.seed;
  c.dataset = dataset_name(config.dataset);
  c.dataset_digest = data_digest;
  c.train_samples = train_samples;
  c.epochs = config.epochs;
  c.precision = precision_name(config.precision);
  c.lr_schedule = lr_schedule_text(config.lr_schedule);
  c.warmup_steps = config.warmup_steps;
  c.total_steps = total_steps(config, train_samples);
  c.weight_decay = config.weight_decay;
  c.nesterov = config.nesterov;
  c.label_smoothing = config.label_smoothing;
  c.augment = augment_text(config.augment);
  c.bn_local = config.bn_local;
  return c;
}

}  // namespace cnn
