// What the trainer trains and evaluates on, behind one interface with two modes (docs/DATA.md):
//
//   memory  both splits held whole (IDX, CIFAR-10 binary, small HDF5 files): the backend is bound once
//           and given each epoch's order as it is;
//   stream  HDF5 only: a rank holds its own contiguous slice of the test split, and of the training
//           split only the samples of a window of upcoming steps, read by hyperslab on a background
//           thread while the previous window trains (double buffering). The backend is re-bound at
//           each window and given positions into it; each step's batch is shifted onto them.
//
// Both modes feed the backend the same samples in the same order, so they train bitwise alike.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cnn/choices.hpp"
#include "cnn/dataset.hpp"
#include "cnn/sampler.hpp"

namespace cnn {

// What the backend must hold before the next step; the trainer applies it (bind_to_backend in
// trainer.cpp). The pointers stay valid until the TrainingData call after the one that returned them.
struct DataBinding {
  const Dataset* train = nullptr;  // with test: Backend::bind_data(*train, *test) first
  const Dataset* test = nullptr;
  const std::vector<std::int32_t>* order = nullptr;  // then Backend::begin_epoch(*order)

  bool empty() const { return train == nullptr && order == nullptr; }
};

// The batch of one step and what to bind first (stream mode, at a window's start).
struct StepData {
  Range batch;          // the global batch to hand to train_step()
  DataBinding rebind;   // empty inside a window
};

class TrainingData {
 public:
  virtual ~TrainingData() = default;

  virtual std::string mode() const = 0;  // "memory" | "stream (window of K steps, ...)"
  virtual const TensorShape& shape() const = 0;
  virtual int classes() const = 0;
  virtual std::int64_t train_count() const = 0;
  virtual std::int64_t test_count() const = 0;
  // Identifies the training data in checkpoints (docs/CHECKPOINT.md, dataset_digest).
  virtual std::uint64_t train_digest() const = 0;

  // Once, before training: this rank's place in the world. Returns the data to bind (memory mode:
  // all of it; stream mode: nothing yet, the first window comes with the first step).
  virtual DataBinding attach(int rank, int world, std::int64_t global_batch) = 0;
  // At each epoch's start; training begins at `first_step` (later than 0 in a resumed epoch).
  // Memory mode hands back `permutation` itself as the order to bind.
  virtual DataBinding begin_epoch(const std::vector<std::int32_t>& permutation, std::int64_t first_step) = 0;
  // Before each step, in step order (stream mode: with the next window to bind when `step` starts one).
  virtual StepData step_batch(std::int64_t step, Range global_batch) = 0;
  // Whether step_batch(step) will re-bind the backend (stream mode, at a window's start). The same on
  // every rank: windows hold the same steps everywhere (src/dist/stream_plan.cpp).
  virtual bool rebinds_before(std::int64_t step) const = 0;
  // The first test sample the backend holds (stream mode: the start of this rank's slice).
  virtual std::int64_t test_held_from() const = 0;
  // One line about what was read, for the end of a run; empty in memory mode.
  virtual std::string read_report() const { return {}; }
};

// The identity of HDF5 training data in checkpoints: FNV-1a 64 over C, H, W and N (each as 8
// little-endian bytes), then the N label bytes. Needs no image read, so stream mode can compute it.
std::uint64_t labels_and_shape_digest(const TensorShape& shape, const std::uint8_t* labels, std::int64_t count);

// memory | stream, as --data-mode auto resolves for this data (auto: memory when both splits' images
// take at most kAutoMemoryBytes). Throws UsageError for stream with a format other than hdf5.
inline constexpr std::int64_t kAutoMemoryBytes = std::int64_t{1} << 30;

// The options of the data (TrainConfig's Data group).
struct DataOptions {
  std::string dir;                          // --data
  DatasetKind dataset = DatasetKind::kFashion;
  std::int64_t train_samples = 0;           // the first N training images (0: all)
  std::int64_t test_samples = 0;            // the first N test images (0: all)
  DataMode mode = DataMode::kAuto;
  std::int64_t stream_window_mb = 64;       // stream mode: MiB for the two windows
  H5ImagePaths h5;                          // hdf5: where images and labels are in the files
};

// The data of --dataset in --data, cut to --train-samples / --test-samples, in --data-mode. Needs no
// MPI (the rank-specific part happens in attach()), so main() can run it on a thread during MPI_Init.
std::unique_ptr<TrainingData> load_training_data(const DataOptions& options);

}  // namespace cnn
