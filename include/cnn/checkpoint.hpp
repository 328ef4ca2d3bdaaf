// HDF5 checkpoints (format version 1) and the run directory that holds them.
//
// Layout (docs/CHECKPOINT.md):
//   /                        attrs format="cnn_mpi-checkpoint", version=1, created, program_version
//   /config                  attrs model, spec, filters, input_shape, classes, global_batch, lr, optimizer,
//                            momentum, beta1, beta2, eps, seed, dataset, dataset_digest, train_samples, epochs
//                            (optional, for files written before they existed: epochs, the --epochs the
//                            run aimed at; spec, derived from model + filters when absent; beta1, beta2, eps)
//   /model/<layer>/<param>   float32, natural shape (e.g. /model/conv1/weight [d,1,3,3])
//   /optimizer/<layer>/<param>/<state>   (momentum: "velocity"; adam: "m", "v"); attr step on /optimizer
//   /progress                attrs epoch, step_in_epoch, global_step, samples_seen, world_size_at_save,
//                            epoch_loss_sum, epoch_correct, epoch_samples (optional: the unfinished epoch's
//                            train loss sum, correct count and samples over all ranks, so its logged loss is exact)
//   /rng                     attrs seed, sampler ("fisher-yates/mix64"), init ("uniform-fan-in/mix64")
//   /metrics                 attrs train_loss, test_loss, test_accuracy
// Every dataset carries a "checksum" attribute (FNV-1a 64 of its raw bytes), verified on load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cnn/model.hpp"
#include "cnn/network.hpp"

namespace cnn {

inline constexpr const char* kCheckpointFormat = "cnn_mpi-checkpoint";
inline constexpr int kCheckpointVersion = 1;

struct CheckpointConfig {
  std::string model;            // --model as given: a preset ("seed", "cifar") or a layer spec
  std::string spec;             // the canonical layer spec (Network::spec); what resume compares
  int filters = 0;
  TensorShape input;
  int classes = 0;
  std::int64_t global_batch = 0;
  double lr = 0.0;
  std::string optimizer;        // "sgd" | "momentum" | "adam"
  double momentum = 0.0;
  double beta1 = 0.9;           // adam
  double beta2 = 0.999;
  double eps = 1e-8;
  std::uint64_t seed = 0;
  std::string dataset;          // "fashion"
  std::uint64_t dataset_digest = 0;
  std::int64_t train_samples = 0;  // training images per epoch actually used
  std::int64_t epochs = 0;         // --epochs of the run that wrote it (0: not recorded)
};

struct CheckpointProgress {
  std::int64_t epoch = 0;          // epochs completed
  std::int64_t step_in_epoch = 0;  // steps completed within the current (unfinished) epoch; 0 at a boundary
  std::int64_t global_step = 0;
  std::int64_t samples_seen = 0;
  int world_size_at_save = 1;
  // Train stats of the unfinished epoch so far, summed over ranks (all 0 at an epoch boundary).
  double epoch_loss_sum = 0.0;
  std::int64_t epoch_correct = 0;
  std::int64_t epoch_samples = 0;
};

struct CheckpointMetrics {
  double train_loss = 0.0;
  double test_loss = 0.0;
  double test_accuracy = 0.0;
};

struct CheckpointState {
  CheckpointConfig config;
  CheckpointProgress progress;
  CheckpointMetrics metrics;
  std::vector<float> params;           // flat, laid out by the model's ParamLayout
  std::vector<float> optimizer_state;  // flat, same layout, optimizer_state_per_param() copies
  std::int64_t optimizer_step = 0;
};

// Writes `path` atomically: path + ".tmp", fsync, rename, fsync of the directory.
// Throws IoError naming the file on any failure; the previous file at `path` is untouched then.
void write_checkpoint(const std::string& path, const CheckpointState& state, const ParamLayout& layout);

// Reads and validates: format name and version, every expected dataset present with the layout's
// shape, every checksum. Throws InputError (content) or IoError (cannot open) naming the file.
// The layout comes from the model the caller builds from the checkpoint's /config (read_checkpoint_config).
CheckpointConfig read_checkpoint_config(const std::string& path);
CheckpointState read_checkpoint(const std::string& path, const ParamLayout& layout);

// The checkpoints of one run directory: RUN_DIR/checkpoints/ckpt-e<epoch>-s<global_step>.h5, plus a
// `latest` file holding the newest one's name.
class CheckpointDir {
 public:
  explicit CheckpointDir(std::string run_dir);

  // Creates the directory if needed and proves it writable (creates and removes a probe file).
  // Removes stale *.h5.tmp left by a killed writer. Throws IoError.
  void prepare() const;

  // Writes a new checkpoint, updates `latest`, then deletes the oldest beyond `keep` (keep >= 1).
  // Returns the path written.
  std::string save(const CheckpointState& state, const ParamLayout& layout, int keep) const;

  // Checkpoints present, newest first (by global_step in the name, then mtime).
  std::vector<std::string> list() const;

  const std::string& dir() const { return dir_; }

 private:
  std::string run_dir_;
  std::string dir_;
};

}  // namespace cnn
