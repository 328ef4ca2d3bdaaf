// Reading and writing image data sets in HDF5 (include/cnn/hdf5_images.hpp). Everything about the
// file is checked at open, so that a training run never meets a malformed file halfway through an
// epoch; reads after that can fail only if the file changes or the disk fails underneath.
#include "cnn/hdf5_images.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "cnn/errors.hpp"
#include "io/hdf5_util.hpp"
#include "io/regular_file.hpp"

namespace cnn {
namespace {

constexpr int kImageRank = 4;  // N, C, H, W
constexpr int kLabelRank = 1;  // N
constexpr int kMaxClasses = 256;                     // labels are single bytes
constexpr hsize_t kMaxSide = 1u << 16;               // per dimension of one image
constexpr std::int64_t kMaxImageBytes = std::int64_t{1} << 28;
constexpr std::int64_t kMaxSamples = INT32_MAX;      // the epoch order is int32 (Sampler)
constexpr std::int64_t kSamplesPerRead = 1024;       // contiguous reads are split into blocks of this many

std::string errno_text(int error) { return std::strerror(error); }

// Missing or unreadable is an I/O problem (exit 3); what HDF5 then finds inside is InputError.
// libhdf5 opens by name, and open(2) of a FIFO blocks forever (SIGTERM only sets a flag, the watchdog
// starts later): so the file is opened here first without blocking and refused unless it is a
// regular file (fsutil::open_regular_file). stat(2) first, only for this file's own messages.
void require_readable_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) throw IoError(path + ": file does not exist");
    throw IoError(path + ": cannot stat: " + errno_text(errno));
  }
  if (S_ISDIR(info.st_mode)) throw IoError(path + ": is a directory, expected an HDF5 file");
  fsutil::require_regular_file(path);
  if (info.st_size == 0) throw InputError(path + ": empty file, not an HDF5 file");
}

h5::Node open_dataset(const h5::FileContext& file, hid_t fid, const std::string& path, const char* option) {
  if (path.empty() || path[0] != '/') file.fail("dataset path '" + path + "' is not absolute (set " + option + ")");
  if (!h5::exists(file, fid, path)) file.fail("missing dataset " + path + " (set its path with " + option + ")");
  h5::Handle object = file.own(H5Oopen(fid, path.c_str(), H5P_DEFAULT), H5Oclose, "H5Oopen", path);
  if (H5Iget_type(object.get()) != H5I_DATASET) file.fail(path + " is not a dataset");
  return h5::Node{std::move(object), path};
}

std::string type_text(hid_t type) {
  const H5T_class_t type_class = H5Tget_class(type);
  const std::size_t bytes = H5Tget_size(type);
  std::string name;
  switch (type_class) {
    case H5T_INTEGER: name = H5Tget_sign(type) == H5T_SGN_NONE ? "unsigned integer" : "signed integer"; break;
    case H5T_FLOAT: name = "float"; break;
    case H5T_STRING: name = "string"; break;
    case H5T_COMPOUND: name = "compound"; break;
    default: name = "non-numeric type"; break;
  }
  return name + " of " + std::to_string(bytes) + " byte(s)";
}

void require_uint8(const h5::FileContext& file, const h5::Node& node) {
  const h5::Handle type = file.own(H5Dget_type(node.id()), H5Tclose, "H5Dget_type", node.path);
  const bool ok = H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == 1 &&
                  H5Tget_sign(type.get()) == H5T_SGN_NONE;
  if (!ok) file.fail("wrong datatype: " + node.path + " is " + type_text(type.get()) + ", expected uint8");
}

std::vector<hsize_t> dims_of(const h5::FileContext& file, const h5::Node& node, int expected_rank,
                             const char* expected_layout) {
  const h5::Handle space = file.own(H5Dget_space(node.id()), H5Sclose, "H5Dget_space", node.path);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) file.fail_call("H5Sget_simple_extent_ndims", node.path);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) file.check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "H5Sget_simple_extent_dims", node.path);
  if (rank != expected_rank) {
    file.fail("wrong rank: " + node.path + " has shape " +
              h5::shape_text(std::vector<std::int64_t>(dims.begin(), dims.end())) + ", expected rank " +
              std::to_string(expected_rank) + " " + expected_layout);
  }
  return dims;
}

int classes_of(const h5::FileContext& file, const h5::Node& labels) {
  if (file.check(H5Aexists(labels.id(), "classes"), "H5Aexists", labels.path) == 0) return kDefaultH5Classes;
  const std::int64_t classes = h5::read_int64_attr(file, labels, "classes");
  if (classes < 1 || classes > kMaxClasses)
    file.fail("attribute 'classes' on " + labels.path + " is " + std::to_string(classes) + ", not in 1.." +
              std::to_string(kMaxClasses));
  return static_cast<int>(classes);
}

// Reads the hyperslab [first, first + n) of whole images into out. The memory dataspace has the
// selection's own shape [n, C, H, W]: HDF5 1.10 then copies whole blocks, where a flat [bytes] memory
// space (or a union of hyperslabs, H5S_SELECT_OR) sends every element through its general
// scatter-gather path, 30 to 100 times slower (measured: docs/DATA.md, "Reading").
void read_block(const h5::FileContext& file, hid_t images, hid_t file_space, const std::string& name,
                const TensorShape& shape, std::int64_t first, std::int64_t n, std::uint8_t* out) {
  const hsize_t start[kImageRank] = {static_cast<hsize_t>(first), 0, 0, 0};
  const hsize_t block[kImageRank] = {static_cast<hsize_t>(n), static_cast<hsize_t>(shape.channels),
                                     static_cast<hsize_t>(shape.height), static_cast<hsize_t>(shape.width)};
  file.check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, block, nullptr), "H5Sselect_hyperslab",
             name);
  const h5::Handle memory = file.own(H5Screate_simple(kImageRank, block, nullptr), H5Sclose, "H5Screate_simple", name);
  file.check(H5Dread(images, H5T_NATIVE_UCHAR, memory.get(), file_space, H5P_DEFAULT, out), "H5Dread", name);
}

// [start, start + length) runs of consecutive samples.
struct Run {
  std::int64_t start = 0;
  std::int64_t length = 0;
};

std::vector<Run> runs_of(const std::vector<std::int64_t>& samples) {
  std::vector<Run> runs;
  for (const std::int64_t s : samples) {
    if (!runs.empty() && runs.back().start + runs.back().length == s) ++runs.back().length;
    else runs.push_back({s, 1});
  }
  return runs;
}

// The sample count and image shape from the images' dimensions, checked against the limits.
void check_image_dims(const h5::FileContext& file, const h5::Node& images, const std::vector<hsize_t>& image_dims,
                      TensorShape& shape, std::int64_t& count) {
  if (image_dims[0] == 0) file.fail(images.path + " holds no samples");
  if (image_dims[0] > static_cast<hsize_t>(kMaxSamples))
    file.fail(images.path + " holds " + std::to_string(image_dims[0]) + " samples, more than the limit of " +
              std::to_string(kMaxSamples));
  for (int d = 1; d < kImageRank; ++d) {
    if (image_dims[d] == 0 || image_dims[d] > kMaxSide)
      file.fail(images.path + " has shape " +
                h5::shape_text(std::vector<std::int64_t>(image_dims.begin(), image_dims.end())) + ": dimension " +
                std::to_string(d) + " is not in 1.." + std::to_string(kMaxSide));
  }
  shape = {static_cast<int>(image_dims[1]), static_cast<int>(image_dims[2]), static_cast<int>(image_dims[3])};
  if (shape.size() > kMaxImageBytes)
    file.fail(images.path + ": one image is " + std::to_string(shape.size()) + " bytes, more than the limit of " +
              std::to_string(kMaxImageBytes));
  count = static_cast<std::int64_t>(image_dims[0]);
}

}  // namespace

struct H5ImageFile::Handles {
  h5::Handle file;
  h5::Handle images;
};

H5ImageFile::H5ImageFile(const std::string& path, const H5ImagePaths& paths, H5Labels label_policy)
    : path_(path), paths_(paths), handles_(std::make_unique<Handles>()) {
  const h5::QuietErrors quiet;
  require_readable_file(path);
  if (H5Fis_hdf5(path.c_str()) <= 0) throw InputError(path + ": not an HDF5 file");
  const h5::FileContext file(path, h5::Mode::kRead);
  handles_->file = file.own(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "H5Fopen", "");
  const hid_t fid = handles_->file.get();

  h5::Node images = open_dataset(file, fid, paths.images, "--h5-images");
  require_uint8(file, images);
  const std::vector<hsize_t> image_dims = dims_of(file, images, kImageRank, "[N,C,H,W]");
  has_labels_ = label_policy == H5Labels::kRequired || (!paths.labels.empty() && paths.labels[0] == '/' &&
                                                        h5::exists(file, fid, paths.labels));
  if (!has_labels_) {
    check_image_dims(file, images, image_dims, shape_, count_);
    handles_->images = std::move(images.handle);
    return;
  }
  h5::Node labels = open_dataset(file, fid, paths.labels, "--h5-labels");
  require_uint8(file, labels);
  const std::vector<hsize_t> label_dims = dims_of(file, labels, kLabelRank, "[N]");
  if (image_dims[0] != label_dims[0]) {
    file.fail("sample counts disagree: " + images.path + " holds " + std::to_string(image_dims[0]) + " images but " +
              labels.path + " holds " + std::to_string(label_dims[0]) + " labels");
  }
  check_image_dims(file, images, image_dims, shape_, count_);
  classes_ = classes_of(file, labels);

  labels_.resize(static_cast<std::size_t>(label_dims[0]));
  file.check(H5Dread(labels.id(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels_.data()), "H5Dread",
             labels.path);
  const auto bad = std::find_if(labels_.begin(), labels_.end(), [this](std::uint8_t l) { return l >= classes_; });
  if (bad != labels_.end())
    file.fail("label " + std::to_string(*bad) + " at index " + std::to_string(bad - labels_.begin()) + " of " +
              labels.path + " is not below " + std::to_string(classes_) + " (the class count)");
  handles_->images = std::move(images.handle);
}

H5ImageFile::~H5ImageFile() {
  const h5::LibraryLock lock;  // the closes are calls into libhdf5 too (src/io/hdf5_util.hpp)
  handles_.reset();
}

void H5ImageFile::count_read(std::int64_t samples) {
  samples_read_ += samples;
  reads_ += 1;
}

H5ReadCounters H5ImageFile::counters() const {
  H5ReadCounters c;
  c.samples = samples_read_.load();
  c.bytes = c.samples * shape_.size();
  c.reads = reads_.load();
  return c;
}

void H5ImageFile::read_range(std::int64_t first, std::int64_t n, std::uint8_t* out) {
  if (first < 0 || n < 0 || first + n > count())
    throw Error(ExitCode::kFailure, "internal error: samples [" + std::to_string(first) + ", " +
                                        std::to_string(first + n) + ") lie outside " + path_);
  if (n == 0) return;
  // Per call, not per object: with a thread-safe HDF5 the error settings belong to the calling thread.
  const h5::QuietErrors quiet;
  const h5::FileContext file(path_, h5::Mode::kRead);
  const hid_t images = handles_->images.get();
  const h5::Handle space = file.own(H5Dget_space(images), H5Sclose, "H5Dget_space", paths_.images);
  // In blocks: HDF5 maps every chunk a read touches before it copies, and that costs more per chunk
  // for one huge read than for several bounded ones.
  for (std::int64_t done = 0; done < n; done += kSamplesPerRead) {
    const std::int64_t block = std::min(kSamplesPerRead, n - done);
    read_block(file, images, space.get(), paths_.images, shape_, first + done, block, out + done * shape_.size());
    count_read(block);
  }
}

void H5ImageFile::read_samples(const std::vector<std::int64_t>& samples, std::uint8_t* out) {
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (samples[i] < 0 || samples[i] >= count() || (i > 0 && samples[i] <= samples[i - 1]))
      throw Error(ExitCode::kFailure, "internal error: sample list for " + path_ + " is not ascending and in range");
  }
  const h5::QuietErrors quiet;
  const h5::FileContext file(path_, h5::Mode::kRead);
  const hid_t images = handles_->images.get();
  const h5::Handle space = file.own(H5Dget_space(images), H5Sclose, "H5Dget_space", paths_.images);
  std::uint8_t* next = out;
  for (const Run& run : runs_of(samples)) {
    read_block(file, images, space.get(), paths_.images, shape_, run.start, run.length, next);
    count_read(run.length);
    next += run.length * shape_.size();
  }
}

Dataset H5ImageFile::read_all(const std::string& name, std::int64_t n) {
  if (n <= 0 || n > count()) n = count();
  Dataset data;
  data.name = name;
  data.shape = shape_;
  data.classes = classes_;
  data.labels.assign(labels_.begin(), labels_.begin() + n);
  data.images.resize(static_cast<std::size_t>(n * shape_.size()));
  read_range(0, n, data.images.data());
  return data;
}

void write_h5_images(const std::string& path, const Dataset& data, const H5ImagePaths& paths,
                     const H5WriteOptions& options) {
  if (data.count() == 0) throw IoError(path + ": refusing to write a data set with no samples");
  if (options.chunk_samples < 1) throw UsageError("chunk size must be at least one sample");
  if (options.deflate_level < 0 || options.deflate_level > 9) throw UsageError("deflate level must be in 0..9");
  const h5::QuietErrors quiet;
  const h5::FileContext file(path, h5::Mode::kWrite);
  // H5F_ACC_EXCL: fails on an existing file instead of truncating it.
  h5::Handle fid = file.own(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, "H5Fcreate", "");
  const h5::Handle link_props = file.own(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "H5Pcreate", "");
  file.check(H5Pset_create_intermediate_group(link_props.get(), 1), "H5Pset_create_intermediate_group", "");

  const auto n = static_cast<hsize_t>(data.count());
  const hsize_t dims[kImageRank] = {n, static_cast<hsize_t>(data.shape.channels),
                                    static_cast<hsize_t>(data.shape.height), static_cast<hsize_t>(data.shape.width)};
  const hsize_t chunk[kImageRank] = {std::min<hsize_t>(n, static_cast<hsize_t>(options.chunk_samples)), dims[1], dims[2],
                                     dims[3]};
  const h5::Handle image_space =
      file.own(H5Screate_simple(kImageRank, dims, nullptr), H5Sclose, "H5Screate_simple", paths.images);
  const h5::Handle image_props = file.own(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "H5Pcreate", paths.images);
  file.check(H5Pset_chunk(image_props.get(), kImageRank, chunk), "H5Pset_chunk", paths.images);
  if (options.deflate_level > 0)
    file.check(H5Pset_deflate(image_props.get(), static_cast<unsigned>(options.deflate_level)), "H5Pset_deflate",
               paths.images);
  h5::Handle images = file.own(H5Dcreate2(fid.get(), paths.images.c_str(), H5T_STD_U8LE, image_space.get(),
                                                link_props.get(), image_props.get(), H5P_DEFAULT),
                                     H5Dclose, "H5Dcreate2", paths.images);
  file.check(H5Dwrite(images.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.images.data()), "H5Dwrite",
             paths.images);

  const h5::Handle label_space = file.own(H5Screate_simple(1, &n, nullptr), H5Sclose, "H5Screate_simple", paths.labels);
  h5::Node labels{file.own(H5Dcreate2(fid.get(), paths.labels.c_str(), H5T_STD_U8LE, label_space.get(),
                                      link_props.get(), H5P_DEFAULT, H5P_DEFAULT),
                           H5Dclose, "H5Dcreate2", paths.labels),
                  paths.labels};
  file.check(H5Dwrite(labels.id(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.labels.data()), "H5Dwrite",
             paths.labels);
  h5::write_attr(file, labels, "classes", static_cast<std::int64_t>(data.classes));
  // Every object closed before the file, so that H5Fclose really flushes and reports a failure.
  if (images.close() < 0) file.fail_call("H5Dclose", paths.images);
  if (labels.handle.close() < 0) file.fail_call("H5Dclose", paths.labels);
  if (fid.close() < 0) file.fail_call("H5Fclose", "");
}

}  // namespace cnn
