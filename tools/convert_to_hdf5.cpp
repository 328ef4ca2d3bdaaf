// cnn_convert: turns IDX (MNIST, Fashion-MNIST) and CIFAR-10 binary directories into the HDF5 files
// that `cnn_mpi --dataset hdf5` reads (docs/DATA.md), with the project's own readers, so that the
// same validation applies and the converted data is byte for byte what those readers return.
//
//   cnn_convert --dataset fashion --data /usr/share/datasets/fashion-mnist --out data/fashion-h5
//
// Writes OUT/train.h5 and OUT/test.h5. Never overwrites: an existing output file is an error (exit 3)
// before anything is written; each file is written under a temporary name and linked into place only
// when complete, so a failed or interrupted conversion leaves no half-written train.h5 or test.h5.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "cnn/dataset.hpp"
#include "cnn/errors.hpp"
#include "cnn/hdf5_images.hpp"

namespace {

struct Options {
  std::string dataset = "fashion";
  std::string data;
  std::string out;
  cnn::H5ImagePaths paths;
  cnn::H5WriteOptions write;
  std::int64_t train_samples = 0;
  std::int64_t test_samples = 0;
};

bool exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

// Writes under PATH.tmp.PID, then link(2)s it to PATH, which fails if PATH appeared meanwhile.
void write_new(const std::string& path, const cnn::Dataset& data, const Options& options) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  try {
    cnn::write_h5_images(temporary, data, options.paths, options.write);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  const int linked = ::link(temporary.c_str(), path.c_str());
  const int error = errno;
  ::unlink(temporary.c_str());
  if (linked != 0) throw cnn::IoError(path + ": cannot create: " + std::strerror(error));
}

int convert(const Options& options) {
  if (options.dataset != "mnist" && options.dataset != "fashion" && options.dataset != "cifar10")
    throw cnn::UsageError("--dataset: cnn_convert reads mnist, fashion or cifar10, not '" + options.dataset + "'");
  struct stat info {};
  const bool out_exists = ::stat(options.out.c_str(), &info) == 0;
  if (out_exists && !S_ISDIR(info.st_mode)) throw cnn::IoError(options.out + ": exists and is not a directory");
  const std::string train_path = options.out + "/train.h5";
  const std::string test_path = options.out + "/test.h5";
  for (const std::string& path : {train_path, test_path})
    if (exists(path)) throw cnn::IoError(path + ": already exists; cnn_convert never overwrites (remove it first)");

  // The input is read whole before the output directory is made: bad input creates nothing.
  cnn::DataSplits data = cnn::load_dataset(options.dataset, options.data);
  if (!out_exists && ::mkdir(options.out.c_str(), 0777) != 0)
    throw cnn::IoError(options.out + ": cannot create the output directory: " + std::strerror(errno));
  if (options.train_samples > 0 && options.train_samples < data.train.count()) data.train.truncate(options.train_samples);
  if (options.test_samples > 0 && options.test_samples < data.test.count()) data.test.truncate(options.test_samples);
  write_new(train_path, data.train, options);
  write_new(test_path, data.test, options);
  const cnn::TensorShape& s = data.train.shape;
  std::printf("cnn_convert: %s: %lld training and %lld test images of %dx%dx%d, %d classes -> %s, %s "
              "(chunks of %lld image(s), %s)\n",
              options.dataset.c_str(), static_cast<long long>(data.train.count()),
              static_cast<long long>(data.test.count()), s.channels, s.height, s.width, data.train.classes,
              train_path.c_str(), test_path.c_str(), static_cast<long long>(options.write.chunk_samples),
              options.write.deflate_level > 0 ? ("deflate " + std::to_string(options.write.deflate_level)).c_str()
                                              : "uncompressed");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"cnn_convert: IDX or CIFAR-10 binary data sets to HDF5 (OUT/train.h5, OUT/test.h5)", "cnn_convert"};
  app.option_defaults()->always_capture_default();
  app.add_option("--dataset", options.dataset, "input format and name: mnist | fashion (IDX) | cifar10 (binary)");
  app.add_option("--data", options.data, "input directory")->required();
  app.add_option("--out", options.out, "output directory (created if missing; existing files are never replaced)")
      ->required();
  app.add_option("--h5-images", options.paths.images, "dataset path of the images in the output");
  app.add_option("--h5-labels", options.paths.labels, "dataset path of the labels in the output");
  app.add_option("--chunk-samples", options.write.chunk_samples,
                 "images per HDF5 chunk (1 suits random per-sample reads in stream mode)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app.add_option("--deflate", options.write.deflate_level, "zlib (deflate) level 1..9, 0: uncompressed")
      ->check(CLI::Range(0, 9));
  app.add_option("--train-samples", options.train_samples, "convert only the first N training images (0: all)");
  app.add_option("--test-samples", options.test_samples, "convert only the first N test images (0: all)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "cnn_convert: %s (see --help)\n", e.what());
    return static_cast<int>(cnn::ExitCode::kUsage);
  }
  try {
    return convert(options);
  } catch (const cnn::Error& e) {
    std::fprintf(stderr, "cnn_convert: %s\n", e.what());
    return static_cast<int>(e.code());
  }
}
