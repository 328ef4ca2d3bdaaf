#include "cnn/trainer.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "cnn/backend.hpp"
#include "cnn/collective_errors.hpp"
#include "cnn/dataset.hpp"
#include "cnn/model.hpp"
#include "cnn/run_log.hpp"
#include "cnn/sampler.hpp"
#include "cnn/train_step.hpp"

namespace cnn {

namespace {

// Each phase's seconds this epoch, reduced over ranks: min, mean, max and the slowest rank.
std::vector<PhaseSpread> reduce_phases(const MpiWorld& world, const PhaseTimes& mine) {
  std::vector<PhaseSpread> spreads;
  for (int p = 0; p < kPhaseCount; ++p) {
    const std::vector<double> all = world.gather_to_root(mine.seconds[static_cast<std::size_t>(p)]);
    if (world.rank() != 0) continue;
    PhaseSpread s;
    s.phase = static_cast<Phase>(p);
    s.min = s.max = all[0];
    double sum = 0.0;
    for (std::size_t r = 0; r < all.size(); ++r) {
      sum += all[r];
      if (all[r] < s.min) s.min = all[r];
      if (all[r] > s.max) {
        s.max = all[r];
        s.max_rank = static_cast<int>(r);
      }
    }
    s.mean = sum / static_cast<double>(all.size());
    spreads.push_back(s);
  }
  return spreads;
}

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f%%", 100.0 * fraction);
  return text;
}

}  // namespace

TrainSummary train(const TrainConfig& config, const MpiWorld& world) {
  const bool root = world.rank() == 0;
  const double run_start = wall_seconds();

  // Every rank reads the data itself; all must succeed before anyone goes on.
  DataSplits data;
  agree_or_stop(world, [&] {
    data = load_dataset(config.dataset, config.data_dir);
    if (config.train_samples > 0 && config.train_samples < data.train.count()) data.train.truncate(config.train_samples);
    if (config.test_samples > 0 && config.test_samples < data.test.count()) data.test.truncate(config.test_samples);
  });
  const RunLog log(config.out_dir);
  agree_or_stop(world, [&] {
    if (root) log.prepare();
  });

  const SeedModel model = make_model(config.model, config.filters, data.train.shape, data.train.classes);
  const ParamLayout layout = model.layout();
  OptimizerSettings optimizer;
  optimizer.kind = parse_optimizer(config.optimizer);
  optimizer.lr = static_cast<float>(config.lr);
  optimizer.momentum = static_cast<float>(config.momentum);

  BackendOptions backend_options;
  backend_options.kind = config.backend;
  backend_options.threads = config.threads;
  backend_options.local_rank = world.local_rank();
  backend_options.optimizer = optimizer.kind;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;
  agree_or_stop(world, [&] {
    backend = make_backend(backend_options, model);
    backend->bind_data(data.train, data.test);
    comm = make_communicator(world, *backend);
  });

  // Rank 0 draws the initial parameters and every rank takes them, so all start identical.
  std::vector<float> params(static_cast<std::size_t>(layout.total()));
  if (root) initialize_params(params.data(), layout, config.seed);
  world.broadcast(params.data(), layout.total() * static_cast<std::int64_t>(sizeof(float)));
  backend->upload_params(params);

  if (root) {
    std::cout << "cnn_mpi " << CNN_VERSION << "\n" << describe(config) << "  model_detail: " << model.describe()
              << ", " << layout.total() << " parameters\n"
              << "  train_images: " << data.train.count() << ", test_images: " << data.test.count() << "\n"
              << "  gradient allreduce: " << comm->name() << "\n";
    std::cout.flush();
  }
  world.barrier();
  std::printf("rank %d/%d on %s: %s backend, %s\n", world.rank(), world.size(), world.host().c_str(),
              backend->name().c_str(), backend->device_description().c_str());
  std::fflush(stdout);
  world.barrier();

  const Sampler sampler(config.seed, data.train.count());
  const std::int64_t steps = batches_per_epoch(data.train.count(), config.batch);
  TrainSummary summary;
  for (std::int64_t epoch = 0; epoch < config.epochs; ++epoch) {
    PhaseTimes times;
    backend->begin_epoch(sampler.permutation(epoch));
    world.barrier();
    const double epoch_start = wall_seconds();
    for (std::int64_t step = 0; step < steps; ++step)
      train_step(*backend, *comm, optimizer, layout.total(),
                 global_batch_range(step, data.train.count(), config.batch), times);
    backend->synchronize();
    const double epoch_seconds = world.allreduce_max(wall_seconds() - epoch_start);

    BatchStats train_stats = backend->take_train_stats();
    double train_sums[1] = {train_stats.loss_sum};
    std::int64_t train_counts[1] = {train_stats.count};
    world.allreduce_sum(train_sums, 1);
    world.allreduce_sum(train_counts, 1);
    const double train_loss = train_sums[0] / static_cast<double>(train_counts[0]);
    if (!std::isfinite(train_loss)) {
      std::ostringstream message;
      message << "training diverged in epoch " << epoch + 1 << ": mean train loss is " << train_loss
              << " (try a smaller --lr)";
      throw DivergedError(message.str());
    }

    const BatchStats test = evaluate_test_set(*backend, world, data.test.count());
    times += backend->take_phase_times();

    EpochMetrics metrics;
    metrics.epoch = epoch + 1;
    metrics.train_loss = train_loss;
    metrics.test_loss = test.loss_sum / static_cast<double>(test.count);
    metrics.test_accuracy = static_cast<double>(test.correct) / static_cast<double>(test.count);
    metrics.epoch_seconds = epoch_seconds;
    metrics.images_per_second = static_cast<double>(data.train.count()) / epoch_seconds;
    metrics.wall_seconds = wall_seconds() - run_start;
    const std::vector<PhaseSpread> phases = reduce_phases(world, times);
    if (root) {
      log.append_epoch(metrics, phases);
      if (!config.quiet || epoch + 1 == config.epochs) {
        std::printf("epoch %lld/%d  train_loss %.4f  test_loss %.4f  test_acc %s  images/s %.0f  epoch %.2fs\n",
                    static_cast<long long>(epoch + 1), config.epochs, metrics.train_loss, metrics.test_loss,
                    percent(metrics.test_accuracy).c_str(), metrics.images_per_second, epoch_seconds);
        std::fflush(stdout);
      }
    }
    summary.final_test_accuracy = metrics.test_accuracy;
    summary.final_test_loss = metrics.test_loss;
    summary.final_train_loss = metrics.train_loss;
  }
  summary.params = backend->download_params();
  return summary;
}

}  // namespace cnn
