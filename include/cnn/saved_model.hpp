// A model read back from a checkpoint to run on data, shared by `cnn_mpi eval` and `cnn_mpi predict`:
// the saved settings, the parameters, the network they describe (from the checkpoint's /config, not
// the command line), and a backend of --device / --backend / --threads holding the parameters.
#pragma once

#include <memory>
#include <string>

#include "cnn/backend.hpp"
#include "cnn/checkpoint.hpp"
#include "cnn/communicator.hpp"
#include "cnn/config.hpp"
#include "cnn/layer_registry.hpp"
#include "cnn/network.hpp"

namespace cnn {

struct SavedModel {
  std::string path;
  CheckpointConfig saved;
  CheckpointState state;
  Network network;
};

// Collective: every rank reads the (small, read-only) file itself and they fail together
// (AlreadyReported, the message printed once).
SavedModel read_saved_model(const std::string& path, const MpiWorld& world);

// Throws InputError "CHECKPOINT: the model takes CxHxW images in K classes, but --dataset NAME has
// ..." unless images of `shape` fit the model's input and, when `classes` is positive (labels known),
// the labels count the model's classes.
void require_model_takes(const SavedModel& model, const TensorShape& shape, int classes, const std::string& dataset);

// Collective: the backend that config's resolved --backend names, on this rank's device, with the
// model's parameters uploaded. Data is bound by the caller.
std::unique_ptr<Backend> make_inference_backend(const TrainConfig& config, const MpiWorld& world,
                                                const SavedModel& model);

}  // namespace cnn
