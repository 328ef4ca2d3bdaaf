// Image classification data in HDF5: a uint8 dataset of images [N, C, H, W] and a uint8 dataset of
// labels [N] (paths configurable, /images and /labels by default). docs/DATA.md describes the format.
//
// H5ImageFile opens and validates a file once (datatype, rank, dimensions, N agreement, every label
// below the class count) and then reads samples on demand: a contiguous range, or any ascending set of
// samples as a union of hyperslabs, so that a rank reads only the samples it trains on. Labels (one
// byte per sample) are read whole at open: they are needed for validation and for the data identity
// in checkpoints, and are ~1/800 of the images.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cnn/dataset.hpp"

namespace cnn {

// The number of classes is the integer attribute `classes` on the labels dataset when present
// (1..256), otherwise this.
inline constexpr int kDefaultH5Classes = 10;

// What a reader has read from the images dataset since it was opened.
struct H5ReadCounters {
  std::int64_t samples = 0;  // images read
  std::int64_t bytes = 0;    // pixel bytes read
  std::int64_t reads = 0;    // H5Dread calls on the images
};

// Whether a file without the labels dataset is accepted (`cnn_mpi predict` of unlabelled images).
enum class H5Labels { kRequired, kOptional };

class H5ImageFile {
 public:
  // Throws IoError for a missing or unreadable file, InputError "PATH: ..." for anything malformed.
  // kOptional: a file without paths.labels opens with has_labels() false, no labels and the default
  // class count; a labels dataset that is there is checked as always.
  H5ImageFile(const std::string& path, const H5ImagePaths& paths, H5Labels labels = H5Labels::kRequired);
  ~H5ImageFile();
  H5ImageFile(const H5ImageFile&) = delete;
  H5ImageFile& operator=(const H5ImageFile&) = delete;

  const std::string& path() const { return path_; }
  const TensorShape& shape() const { return shape_; }
  int classes() const { return classes_; }
  std::int64_t count() const { return count_; }
  bool has_labels() const { return has_labels_; }
  const std::vector<std::uint8_t>& labels() const { return labels_; }  // empty without has_labels()

  // Images [first, first + n) into out (n * shape().size() bytes).
  void read_range(std::int64_t first, std::int64_t n, std::uint8_t* out);
  // The images of `samples` (strictly ascending) into out, in that order: one hyperslab read per run
  // of consecutive samples.
  void read_samples(const std::vector<std::int64_t>& samples, std::uint8_t* out);

  // The first n samples (all when n is 0 or more than count()) as a Dataset named `name`.
  Dataset read_all(const std::string& name, std::int64_t n);

  H5ReadCounters counters() const;

 private:
  struct Handles;
  void count_read(std::int64_t samples);
  std::string path_;
  H5ImagePaths paths_;
  std::unique_ptr<Handles> handles_;
  TensorShape shape_;
  int classes_ = kDefaultH5Classes;
  std::int64_t count_ = 0;
  bool has_labels_ = true;
  std::vector<std::uint8_t> labels_;
  std::atomic<std::int64_t> samples_read_{0};
  std::atomic<std::int64_t> reads_{0};
};

// How the converter lays a file out. Chunks of `chunk_samples` whole images suit per-sample
// hyperslab reads; deflate_level 0 stores them uncompressed, 1..9 with zlib (deflate).
struct H5WriteOptions {
  std::int64_t chunk_samples = 1;
  int deflate_level = 0;
};

// Writes `data` as a new file (H5F_ACC_EXCL: an existing file is never touched; IoError instead),
// with the attribute `classes` on the labels. Throws IoError naming the file on any failure.
void write_h5_images(const std::string& path, const Dataset& data, const H5ImagePaths& paths,
                     const H5WriteOptions& options);

}  // namespace cnn
