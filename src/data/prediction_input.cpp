// The split `cnn_mpi predict` reads (include/cnn/prediction_input.hpp).
#include "cnn/prediction_input.hpp"

#include <algorithm>
#include <cstring>

#include "cnn/errors.hpp"
#include "cnn/hdf5_images.hpp"

namespace cnn {

PredictionInput::PredictionInput(const PredictionInputOptions& options) {
  const char* split = options.train_split ? "train" : "test";
  if (options.dataset == DatasetKind::kHdf5) {
    // The same file names as the trainer's (training_data.cpp): DIR/train.h5 and DIR/test.h5.
    const std::string path = options.dir + "/" + split + ".h5";
    h5_ = std::make_unique<H5ImageFile>(path, options.h5, H5Labels::kOptional);
    name_ = path;
    shape_ = h5_->shape();
    classes_ = h5_->classes();
    count_ = h5_->count();
    has_labels_ = h5_->has_labels();
    if (has_labels_) labels_ = h5_->labels();
  } else {
    whole_ = load_dataset_split(dataset_name(options.dataset), options.dir, options.train_split);
    name_ = whole_.name;
    shape_ = whole_.shape;
    classes_ = whole_.classes;
    count_ = whole_.count();
    labels_ = whole_.labels;
  }
  if (options.samples > 0 && options.samples < count_) count_ = options.samples;
  if (has_labels_) labels_.resize(static_cast<std::size_t>(count_));
}

PredictionInput::~PredictionInput() = default;

void PredictionInput::read(std::int64_t first, std::int64_t n, Dataset& out) {
  if (first < 0 || n < 0 || first + n > count_)
    throw Error(ExitCode::kFailure, "internal error: images [" + std::to_string(first) + ", " +
                                        std::to_string(first + n) + ") lie outside " + name_);
  out.name = name_;
  out.shape = shape_;
  out.classes = classes_;
  const auto bytes = static_cast<std::size_t>(n * shape_.size());
  out.images.resize(bytes);
  if (h5_) {
    h5_->read_range(first, n, out.images.data());
  } else if (bytes > 0) {
    std::memcpy(out.images.data(), whole_.image(first), bytes);
  }
  if (has_labels_) out.labels.assign(labels_.begin() + first, labels_.begin() + first + n);
  else out.labels.assign(static_cast<std::size_t>(n), 0);
}

}  // namespace cnn
