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

#include "cnn/backend.hpp"
#include "cnn/config.hpp"
#include "cnn/dataset.hpp"
#include "cnn/sampler.hpp"

namespace cnn {

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

  // Once, after the backend is made: binds this rank's data (memory mode: all of it).
  virtual void bind(Backend& backend, int rank, int world, std::int64_t global_batch) = 0;
  // At each epoch's start; training begins at `first_step` (later than 0 in a resumed epoch).
  virtual void begin_epoch(Backend& backend, const std::vector<std::int32_t>& permutation,
                           std::int64_t first_step) = 0;
  // Before each step, in step order: returns the batch to hand to train_step() (stream mode: after
  // re-binding the backend when `step` starts a new window).
  virtual Range step_batch(Backend& backend, std::int64_t step, Range global_batch) = 0;
  // Whether step_batch(step) will re-bind the backend (stream mode, at a window's start). The same on
  // every rank: windows hold the same steps everywhere (src/stream_plan.cpp).
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

// The data of --dataset in --data, cut to --train-samples / --test-samples, in --data-mode. Needs no
// MPI (the rank-specific part happens in bind()), so main() can run it on a thread during MPI_Init.
std::unique_ptr<TrainingData> load_training_data(const TrainConfig& config);

}  // namespace cnn
