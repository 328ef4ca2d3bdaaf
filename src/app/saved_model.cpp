#include "cnn/saved_model.hpp"

#include "cnn/collective_errors.hpp"
#include "cnn/errors.hpp"

namespace cnn {

SavedModel read_saved_model(const std::string& path, const MpiWorld& world) {
  SavedModel model;
  model.path = path;
  agree_or_stop(world, [&] {
    const CheckpointReader reader(path);  // read and verified once
    model.saved = reader.config();
    try {
      model.network = build_network(model.saved.spec, model.saved.filters, model.saved.input, model.saved.classes);
    } catch (const UsageError& e) {
      throw InputError(path + ": /config spec does not describe a network: " + e.what());
    }
    model.state = reader.read(model.network.layout);
    if (static_cast<std::int64_t>(model.state.bn_running.size()) != model.network.state_count)
      throw InputError(path + ": /state/bn_running holds " + std::to_string(model.state.bn_running.size()) +
                       " values, but the network's bn layers keep " + std::to_string(model.network.state_count));
  });
  return model;
}

void require_model_takes(const SavedModel& model, const TensorShape& shape, int classes, const std::string& dataset) {
  const TensorShape& input = model.saved.input;
  const bool fits = shape.channels == input.channels && shape.height == input.height && shape.width == input.width;
  if (fits && (classes <= 0 || classes == model.saved.classes)) return;
  throw InputError(model.path + ": the model takes " + shape_text(input) + " images in " +
                   std::to_string(model.saved.classes) + " classes, but --dataset " + dataset + " has " +
                   shape_text(shape) + (classes > 0 ? " in " + std::to_string(classes) : std::string(" (no labels)")));
}

std::unique_ptr<Backend> make_inference_backend(const TrainConfig& config, const MpiWorld& world,
                                                const SavedModel& model) {
  BackendOptions options;
  options.kind = config.backend.value_or(BackendKind::kThreads);  // resolve_config has set it
  options.threads = config.threads;
  options.local_rank = world.local_rank();
  options.precision = config.precision;  // cuda: --precision as in training; CPU: fp32 (resolve_config)
  std::unique_ptr<Backend> backend;
  agree_or_stop(world, [&] {
    backend = make_backend(options, model.network);
    backend->upload_params(model.state.params);
    backend->upload_state(model.state.bn_running);  // the running statistics evaluation normalises with
  });
  return backend;
}

}  // namespace cnn
