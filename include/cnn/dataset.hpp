// An image classification data set held as uint8 pixels, contiguous [N, C, H, W], so it can be
// copied to a GPU in one call and gathered by index. Pixels are normalised (x / 255) only when a
// batch is gathered.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cnn/model.hpp"

namespace cnn {

struct Dataset {
  std::string name;                    // "fashion/train"
  TensorShape shape;                   // of one image
  std::vector<std::uint8_t> images;    // [count, C, H, W]
  std::vector<std::uint8_t> labels;    // [count], each < classes
  int classes = 10;

  std::int64_t count() const { return static_cast<std::int64_t>(labels.size()); }
  const std::uint8_t* image(std::int64_t i) const { return images.data() + i * shape.size(); }
  // Keeps the first n samples (n <= count()).
  void truncate(std::int64_t n);
};

struct DataSplits {
  Dataset train;
  Dataset test;
  // FNV-1a over the label bytes and image bytes of both splits: identifies the data in checkpoints.
  std::uint64_t digest() const;
};

// Where the images and labels are inside an HDF5 data file (--h5-images, --h5-labels).
struct H5ImagePaths {
  std::string images = "/images";
  std::string labels = "/labels";
};

// Loads train and test splits of --dataset from --data, whole:
//   mnist, fashion  IDX files with the standard names (train-images-idx3-ubyte, ...), raw or .gz;
//   cifar10         CIFAR-10 binary batches (data_batch_1..5.bin, test_batch.bin), raw or .gz;
//   hdf5            train.h5 and test.h5 (docs/DATA.md), datasets at `paths`.
// Throws UsageError for an unknown name, IoError / InputError naming the file.
DataSplits load_dataset(const std::string& dataset, const std::string& dir, const H5ImagePaths& paths = {});

// One split of the whole-file formats (mnist, fashion, cifar10), as load_dataset reads it, without
// reading the other: `train` picks the training split. HDF5 is read by H5ImageFile (hdf5_images.hpp)
// instead; asking for it here is a UsageError, as is an unknown name.
Dataset load_dataset_split(const std::string& dataset, const std::string& dir, bool train);

}  // namespace cnn
