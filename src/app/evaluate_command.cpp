#include "cnn/evaluate_command.hpp"

#include <cstdio>

#include "cnn/backend.hpp"
#include "cnn/collective_errors.hpp"
#include "cnn/dataset.hpp"
#include "cnn/resume.hpp"
#include "cnn/saved_model.hpp"
#include "cnn/train_step.hpp"

namespace cnn {

int evaluate_checkpoint_command(const TrainConfig& config, const MpiWorld& world) {
  // The checkpoint first: a bad file is reported before seconds of data loading.
  const SavedModel model = read_saved_model(config.checkpoint, world);

  DataSplits data;
  agree_or_stop(world, [&] {
    data = load_dataset(dataset_name(config.dataset), config.data_dir, H5ImagePaths{config.h5_images, config.h5_labels});
    if (config.test_samples > 0 && config.test_samples < data.test.count()) data.test.truncate(config.test_samples);
    require_model_takes(model, data.test.shape, data.test.classes, dataset_name(config.dataset));
  });

  std::unique_ptr<Backend> backend = make_inference_backend(config, world, model);
  agree_or_stop(world, [&] { backend->bind_data(data.train, data.test); });
  const BatchStats test = evaluate_test_set(*backend, world, data.test.count());

  if (world.rank() == 0) {
    if (!model.state.verified_whole) std::printf("%s\n", version1_note(config.checkpoint).c_str());
    std::printf("eval: %s (epochs done %lld, global step %lld, %s)\n", config.checkpoint.c_str(),
                static_cast<long long>(model.state.progress.epoch),
                static_cast<long long>(model.state.progress.global_step), model.network.describe().c_str());
    std::printf("test_loss %.6f  test_acc %.2f%%  (%lld images of %s, %d rank(s))\n",
                test.loss_sum / static_cast<double>(test.count),
                100.0 * static_cast<double>(test.correct) / static_cast<double>(test.count),
                static_cast<long long>(test.count), dataset_name(config.dataset), world.size());
    std::fflush(stdout);
  }
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace cnn
