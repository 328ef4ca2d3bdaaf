// The CIFAR-10 binary reader on synthetic files written by the test in the real format (1 label byte
// + 3072 pixel bytes per record, five training batches and a test batch, raw or gzip): read back
// exactly, in file order; and every malformed variant refused with one line naming the file.
#define BOOST_TEST_MODULE cifar_reader
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "boost_test.hpp"
#include "cnn/cifar_reader.hpp"
#include "cnn/dataset.hpp"
#include "cnn/errors.hpp"
#include "test_files.hpp"

namespace {

using cnn::test::TempDir;
using cnn::test::error_of;

using Bytes = std::vector<std::uint8_t>;

// `records` random records; record r gets label labels[r] when given, else r % 10.
Bytes records(int count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes out;
  for (int r = 0; r < count; ++r) {
    out.push_back(static_cast<std::uint8_t>((r + seed) % 10));
    for (std::int64_t p = 0; p < cnn::kCifarImageBytes; ++p) out.push_back(static_cast<std::uint8_t>(rng()));
  }
  return out;
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(file);
}

// A complete synthetic distribution: batch b holds 2 + b records; batch 3 and the test batch gzipped.
struct Distribution {
  std::vector<Bytes> train;
  Bytes test;
};

Distribution write_distribution(const TempDir& dir) {
  Distribution d;
  const std::vector<std::string> names = cnn::cifar10_train_files();
  for (int b = 0; b < 5; ++b) {
    d.train.push_back(records(2 + b, 100 + b));
    if (b == 2) write_gzip(dir.file(names[b] + ".gz"), d.train.back());
    else write_file(dir.file(names[b]), d.train.back());
  }
  d.test = records(3, 7);
  write_gzip(dir.file(cnn::cifar10_test_file() + ".gz"), d.test);
  return d;
}

// The Dataset that a list of record buffers must become.
void expect_split(const cnn::Dataset& split, const std::vector<Bytes>& files) {
  Bytes labels, images;
  for (const Bytes& file : files) {
    for (std::size_t r = 0; r < file.size(); r += cnn::kCifarRecordBytes) {
      labels.push_back(file[r]);
      images.insert(images.end(), file.begin() + static_cast<std::ptrdiff_t>(r) + 1,
                    file.begin() + static_cast<std::ptrdiff_t>(r + cnn::kCifarRecordBytes));
    }
  }
  BOOST_TEST(split.shape.channels == 3);
  BOOST_TEST(split.shape.height == 32);
  BOOST_TEST(split.shape.width == 32);
  BOOST_TEST(split.classes == 10);
  BOOST_TEST(split.labels == labels, boost::test_tools::per_element());
  BOOST_TEST((split.images == images));
}

void expect_message(const std::string& message, const std::string& path, const std::string& fragment) {
  BOOST_TEST_INFO("message: " << message);
  BOOST_TEST(message.rfind(path, 0) == 0);  // starts with the file's path
  BOOST_TEST(message.find(fragment) != std::string::npos);
  BOOST_TEST(message.find('\n') == std::string::npos);
}

}  // namespace

BOOST_AUTO_TEST_CASE(synthetic_distribution_reads_back_exactly_in_file_order) {
  TempDir dir;
  const Distribution d = write_distribution(dir);
  const cnn::DataSplits splits = cnn::load_dataset("cifar10", dir.path);
  expect_split(splits.train, d.train);
  expect_split(splits.test, {d.test});
  BOOST_TEST(splits.train.count() == 2 + 3 + 4 + 5 + 6);
  BOOST_TEST(splits.train.name == "cifar10/train");
}

BOOST_AUTO_TEST_CASE(malformed_batches_are_refused_naming_the_file) {
  const std::string batch3 = cnn::cifar10_train_files()[2];
  const std::string batch4 = cnn::cifar10_train_files()[3];
  {  // missing file: neither NAME nor NAME.gz
    TempDir dir;
    write_distribution(dir);
    std::filesystem::remove(dir.file(batch4));
    expect_message(error_of<cnn::IoError>([&] { cnn::load_dataset("cifar10", dir.path); }), dir.file(batch4),
                   "file does not exist");
  }
  {  // empty file
    TempDir dir;
    write_distribution(dir);
    write_file(dir.file(batch4), {});
    expect_message(error_of<cnn::InputError>([&] { cnn::load_dataset("cifar10", dir.path); }), dir.file(batch4),
                   "empty file");
  }
  {  // truncated: the last record cut short
    TempDir dir;
    write_distribution(dir);
    Bytes cut = records(4, 1);
    cut.resize(cut.size() - 100);
    write_file(dir.file(batch4), cut);
    expect_message(error_of<cnn::InputError>([&] { cnn::load_dataset("cifar10", dir.path); }), dir.file(batch4),
                   "not a whole number of 3073-byte records (3 records and 2973 bytes over)");
  }
  {  // size not a multiple of 3073: one byte too many
    TempDir dir;
    write_distribution(dir);
    Bytes extra = records(2, 1);
    extra.push_back(0);
    write_file(dir.file(batch4), extra);
    expect_message(error_of<cnn::InputError>([&] { cnn::load_dataset("cifar10", dir.path); }), dir.file(batch4),
                   "(2 records and 1 bytes over)");
  }
  {  // a label of 10 in the second record
    TempDir dir;
    write_distribution(dir);
    Bytes bad = records(3, 1);
    bad[cnn::kCifarRecordBytes] = 10;
    write_file(dir.file(batch4), bad);
    expect_message(error_of<cnn::InputError>([&] { cnn::load_dataset("cifar10", dir.path); }), dir.file(batch4),
                   "label 10 in record 1 (byte offset 3073) is not below 10");
  }
  {  // a gzip stream cut in half
    TempDir dir;
    write_distribution(dir);
    const std::string gz = dir.file(batch3 + ".gz");
    std::filesystem::resize_file(gz, std::filesystem::file_size(gz) / 2);
    expect_message(error_of<cnn::InputError>([&] { cnn::load_dataset("cifar10", dir.path); }), gz,
                   "truncated gzip stream");
  }
  {  // the test batch missing
    TempDir dir;
    write_distribution(dir);
    std::filesystem::remove(dir.file(cnn::cifar10_test_file() + ".gz"));
    expect_message(error_of<cnn::IoError>([&] { cnn::load_dataset("cifar10", dir.path); }),
                   dir.file(cnn::cifar10_test_file()), "file does not exist");
  }
}

BOOST_AUTO_TEST_CASE(parser_takes_any_whole_number_of_records_and_appends) {
  cnn::Dataset split;
  const Bytes a = records(1, 3), b = records(2, 4);
  cnn::parse_cifar10_records(a, "a", split);
  cnn::parse_cifar10_records(b, "b", split);
  BOOST_TEST(split.labels.size() == 3u);
  BOOST_TEST(split.images.size() == static_cast<std::size_t>(3 * cnn::kCifarImageBytes));
  BOOST_TEST(split.images[cnn::kCifarImageBytes] == b[1]);  // record 0 of b, pixel 0
}
