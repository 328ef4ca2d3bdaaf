// The images `cnn_mpi predict` classifies (docs/PREDICT.md): one split of --data in any format the
// trainer reads. IDX and CIFAR-10 binary splits are read whole, as the trainer reads them; an HDF5
// split is read by hyperslab, each rank only the ranges it predicts, a round at a time, so that a file
// larger than memory works whatever --data-mode says. An HDF5 file without the labels dataset is
// accepted: its images are predicted and the label column stays empty.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cnn/choices.hpp"
#include "cnn/dataset.hpp"

namespace cnn {

class H5ImageFile;

struct PredictionInputOptions {
  std::string dir;                           // --data
  DatasetKind dataset = DatasetKind::kFashion;
  H5ImagePaths h5;                           // hdf5: where images and labels are in the file
  bool train_split = false;                  // --split train (default: test)
  std::int64_t samples = 0;                  // the first N images of the split (0: all)
};

class PredictionInput {
 public:
  // Reads what every rank needs (the labels; IDX, CIFAR-10: the whole split). Throws UsageError,
  // IoError or InputError naming the file, as the trainer's loader does.
  explicit PredictionInput(const PredictionInputOptions& options);
  ~PredictionInput();
  PredictionInput(const PredictionInput&) = delete;
  PredictionInput& operator=(const PredictionInput&) = delete;

  const std::string& name() const { return name_; }  // "fashion/test", "DIR/test.h5"
  const TensorShape& shape() const { return shape_; }
  int classes() const { return classes_; }            // of the labels (without labels: meaningless)
  std::int64_t count() const { return count_; }
  bool has_labels() const { return has_labels_; }
  std::uint8_t label(std::int64_t i) const { return labels_[static_cast<std::size_t>(i)]; }

  // Images [first, first + n) into `out` (replacing what it held), labelled where labels are known and
  // 0 otherwise, for Backend::bind_data. Throws IoError / InputError naming the file.
  void read(std::int64_t first, std::int64_t n, Dataset& out);

 private:
  std::string name_;
  TensorShape shape_;
  int classes_ = 0;
  std::int64_t count_ = 0;
  bool has_labels_ = true;
  std::vector<std::uint8_t> labels_;   // count_ of them when has_labels_
  Dataset whole_;                      // IDX, CIFAR-10: the split
  std::unique_ptr<H5ImageFile> h5_;    // HDF5: the split's file
};

}  // namespace cnn
