#include "cnn/evaluate_command.hpp"

#include <cstdio>

#include "cnn/backend.hpp"
#include "cnn/checkpoint.hpp"
#include "cnn/collective_errors.hpp"
#include "cnn/dataset.hpp"
#include "cnn/errors.hpp"
#include "cnn/resume.hpp"
#include "cnn/train_step.hpp"

namespace cnn {

namespace {

std::string shape_text(const TensorShape& s) {
  return std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" + std::to_string(s.width);
}

}  // namespace

int evaluate_checkpoint_command(const TrainConfig& config, const MpiWorld& world) {
  // Every rank reads the (small, read-only) file itself; agree_or_stop makes them fail together.
  // The checkpoint first: a bad file is reported before seconds of data loading.
  CheckpointConfig saved;
  CheckpointState state;
  Network network;
  agree_or_stop(world, [&] {
    const CheckpointReader reader(config.checkpoint);  // read and verified once
    saved = reader.config();
    try {
      network = build_network(saved.spec, saved.filters, saved.input, saved.classes);
    } catch (const UsageError& e) {
      throw InputError(config.checkpoint + ": /config spec does not describe a network: " + e.what());
    }
    state = reader.read(network.layout);
  });

  DataSplits data;
  agree_or_stop(world, [&] {
    data = load_dataset(dataset_name(config.dataset), config.data_dir, H5ImagePaths{config.h5_images, config.h5_labels});
    if (config.test_samples > 0 && config.test_samples < data.test.count()) data.test.truncate(config.test_samples);
    const TensorShape& s = data.test.shape;
    if (s.channels != saved.input.channels || s.height != saved.input.height || s.width != saved.input.width ||
        data.test.classes != saved.classes)
      throw InputError(config.checkpoint + ": the model takes " + shape_text(saved.input) + " images in " +
                       std::to_string(saved.classes) + " classes, but --dataset " + dataset_name(config.dataset) + " has " +
                       shape_text(s) + " in " + std::to_string(data.test.classes));
  });

  BackendOptions options;
  options.kind = config.backend.value_or(BackendKind::kThreads);  // resolve_config has set it
  options.threads = config.threads;
  options.local_rank = world.local_rank();
  std::unique_ptr<Backend> backend;
  agree_or_stop(world, [&] {
    backend = make_backend(options, network);
    backend->bind_data(data.train, data.test);
  });
  backend->upload_params(state.params);
  const BatchStats test = evaluate_test_set(*backend, world, data.test.count());

  if (world.rank() == 0) {
    if (!state.verified_whole) std::printf("%s\n", version1_note(config.checkpoint).c_str());
    std::printf("eval: %s (epochs done %lld, global step %lld, %s)\n", config.checkpoint.c_str(),
                static_cast<long long>(state.progress.epoch), static_cast<long long>(state.progress.global_step),
                network.describe().c_str());
    std::printf("test_loss %.6f  test_acc %.2f%%  (%lld images of %s, %d rank(s))\n",
                test.loss_sum / static_cast<double>(test.count),
                100.0 * static_cast<double>(test.correct) / static_cast<double>(test.count),
                static_cast<long long>(test.count), dataset_name(config.dataset), world.size());
    std::fflush(stdout);
  }
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace cnn
