// Loading the train and test splits of a named data set, and the digest that ties a checkpoint to
// the exact bytes it was trained on.
#include "cnn/dataset.hpp"

#include <sys/stat.h>

#include <array>
#include <cstddef>
#include <optional>

#include "cnn/choices.hpp"
#include "cnn/cifar_reader.hpp"
#include "cnn/errors.hpp"
#include "cnn/hdf5_images.hpp"
#include "cnn/idx_reader.hpp"

namespace cnn {
namespace {

// MNIST and Fashion-MNIST share the IDX layout, the file names and the number of classes.
constexpr int kIdxClasses = 10;
constexpr int kIdxChannels = 1;  // greyscale
constexpr std::array<const char*, 2> kIdxDatasets = {"mnist", "fashion"};
constexpr std::array<const char*, 2> kOtherDatasets = {"cifar10", "hdf5"};

// FNV-1a, 64-bit: a fixed, dependency-free hash, stable across platforms and versions.
constexpr std::uint64_t kFnvOffsetBasis = 14695981039346656037ULL;
constexpr std::uint64_t kFnvPrime = 1099511628211ULL;

std::uint64_t fnv1a(std::uint64_t hash, const std::vector<std::uint8_t>& bytes) {
  for (const std::uint8_t byte : bytes) {
    hash ^= byte;
    hash *= kFnvPrime;
  }
  return hash;
}

std::string valid_names() {
  std::string names;
  for (const char* known : kIdxDatasets) names += (names.empty() ? "" : ", ") + std::string(known);
  for (const char* known : kOtherDatasets) names += ", " + std::string(known);
  return names;
}

void require_directory(const std::string& dir) {
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) throw IoError(dir + ": data directory does not exist");
  if (!S_ISDIR(info.st_mode)) throw IoError(dir + ": data directory is not a directory");
}

// One split: "<prefix>-images-idx3-ubyte" with "<prefix>-labels-idx1-ubyte", whose counts must agree.
Dataset load_idx_split(const std::string& dataset, const std::string& dir, const std::string& prefix,
                       const std::string& split) {
  const std::string images_path = find_idx_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(dir, prefix + "-labels-idx1-ubyte");
  IdxImages images = read_idx_images(images_path);
  std::vector<std::uint8_t> labels = read_idx_labels(labels_path, kIdxClasses);
  if (images.count != static_cast<std::int64_t>(labels.size())) {
    throw InputError(images_path + ": holds " + std::to_string(images.count) + " images but " + labels_path +
                     " holds " + std::to_string(labels.size()) + " labels");
  }
  Dataset out;
  out.name = dataset + "/" + split;
  out.shape = {kIdxChannels, images.rows, images.cols};
  out.images = std::move(images.pixels);
  out.labels = std::move(labels);
  out.classes = kIdxClasses;
  return out;
}

}  // namespace

void Dataset::truncate(std::int64_t n) {
  if (n < 0 || n > count()) {
    throw UsageError(name + ": cannot keep " + std::to_string(n) + " samples, it holds " + std::to_string(count()));
  }
  labels.resize(static_cast<std::size_t>(n));
  images.resize(static_cast<std::size_t>(n * shape.size()));
  labels.shrink_to_fit();
  images.shrink_to_fit();
}

std::uint64_t DataSplits::digest() const {
  std::uint64_t hash = kFnvOffsetBasis;
  hash = fnv1a(hash, train.labels);
  hash = fnv1a(hash, train.images);
  hash = fnv1a(hash, test.labels);
  hash = fnv1a(hash, test.images);
  return hash;
}

DataSplits load_dataset(const std::string& dataset, const std::string& dir, const H5ImagePaths& paths) {
  const std::optional<DatasetKind> kind = dataset_named(dataset);
  if (!kind) throw UsageError("unknown dataset '" + dataset + "'; valid names: " + valid_names());
  require_directory(dir);
  if (*kind == DatasetKind::kCifar10) return load_cifar10(dir);
  if (*kind == DatasetKind::kHdf5) {
    DataSplits splits;
    H5ImageFile train(dir + "/train.h5", paths);
    H5ImageFile test(dir + "/test.h5", paths);
    splits.train = train.read_all("hdf5/train", 0);
    splits.test = test.read_all("hdf5/test", 0);
    const TensorShape& a = splits.train.shape;
    const TensorShape& b = splits.test.shape;
    if (a.channels != b.channels || a.height != b.height || a.width != b.width || train.classes() != test.classes())
      throw InputError(test.path() + ": its images or classes differ from those of " + train.path());
    return splits;
  }
  DataSplits splits;
  splits.train = load_idx_split(dataset, dir, "train", "train");
  splits.test = load_idx_split(dataset, dir, "t10k", "test");
  const TensorShape& a = splits.train.shape;
  const TensorShape& b = splits.test.shape;
  if (a.height != b.height || a.width != b.width) {
    throw InputError(find_idx_file(dir, "t10k-images-idx3-ubyte") + ": images are " + std::to_string(b.height) +
                     "x" + std::to_string(b.width) + " but the training images are " + std::to_string(a.height) +
                     "x" + std::to_string(a.width));
  }
  return splits;
}

Dataset load_dataset_split(const std::string& dataset, const std::string& dir, bool train) {
  const std::optional<DatasetKind> kind = dataset_named(dataset);
  if (!kind) throw UsageError("unknown dataset '" + dataset + "'; valid names: " + valid_names());
  if (*kind == DatasetKind::kHdf5) throw UsageError("load_dataset_split: hdf5 splits are read by H5ImageFile");
  require_directory(dir);
  if (*kind == DatasetKind::kCifar10)
    return train ? read_cifar10_split(dir, cifar10_train_files(), "cifar10/train")
                 : read_cifar10_split(dir, {cifar10_test_file()}, "cifar10/test");
  return train ? load_idx_split(dataset, dir, "train", "train") : load_idx_split(dataset, dir, "t10k", "test");
}

}  // namespace cnn
