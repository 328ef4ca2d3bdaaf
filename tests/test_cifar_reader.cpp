// The CIFAR-10 binary reader on synthetic files written by the test in the real format (1 label byte
// + 3072 pixel bytes per record, five training batches and a test batch, raw or gzip): read back
// exactly, in file order; and every malformed variant refused with one line naming the file.
#define BOOST_TEST_MODULE cifar_reader
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "boost_test.hpp"
#include "cnn/cifar_reader.hpp"
#include "cnn/dataset.hpp"
#include "cnn/errors.hpp"
#include "data_hazards.hpp"
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

// ---- non-regular files, the format's size bound and gzip bombs (issue 22) ------------------------------

BOOST_AUTO_TEST_CASE(non_regular_batches_refused_without_blocking) {
  const cnn::test::HangGuard guard;  // a reader blocking in open(2) on the FIFO fails here, not hangs
  for (const cnn::test::NonRegular& thing : cnn::test::kNonRegularKinds) {
    for (const std::string& name : {cnn::cifar10_train_files()[1], cnn::cifar10_test_file() + ".gz"}) {
      BOOST_TEST_CONTEXT(thing.kind << " as " << name) {
        TempDir dir;
        write_distribution(dir);
        const std::string path = dir.file(name);
        std::filesystem::remove(path);
        cnn::test::make_non_regular(path, thing.kind);
        expect_message(error_of<cnn::IoError>([&] { cnn::load_dataset("cifar10", dir.path); }), path, thing.message);
      }
    }
  }
}

// The format has no header: 10000 records (30730000 bytes) bound a batch, raw or inflated.
BOOST_AUTO_TEST_CASE(batches_are_bounded_by_the_formats_10000_records) {
  TempDir dir;
  // Sparse files of zeros (label 0): read at once, not written byte by byte.
  const std::string full = dir.file("full.bin");
  write_file(full, {});
  std::filesystem::resize_file(full, static_cast<std::uintmax_t>(cnn::kCifarMaxBatchBytes));
  cnn::Dataset split;
  cnn::read_cifar10_batch(full, split);
  BOOST_TEST(split.count() == cnn::kCifarMaxRecords);

  const std::string over = dir.file("over.bin");
  write_file(over, {});
  std::filesystem::resize_file(over, static_cast<std::uintmax_t>(cnn::kCifarMaxBatchBytes + cnn::kCifarRecordBytes));
  expect_message(error_of<cnn::InputError>([&] { cnn::read_cifar10_batch(over, split); }), over,
                 "file is 30733073 bytes, more than 30730000 bytes, the most a CIFAR-10 batch holds (10000 records of "
                 "3073 bytes)");
  expect_message(error_of<cnn::InputError>([&] {
                   cnn::parse_cifar10_records(Bytes(static_cast<std::size_t>(cnn::kCifarMaxBatchBytes + cnn::kCifarRecordBytes)),
                                              "p", split);
                 }),
                 "p", "10001 records, more than the 10000 of a CIFAR-10 batch");

  // 1 GiB of zeros in 1 MB: inflation stops one byte past 30730000 (the wrong CRC of the bomb would
  // be met otherwise: "corrupt gzip stream").
  const std::string bomb = dir.file("data_batch_1.bin.gz");
  write_file(bomb, cnn::test::gzip_bomb({}, 1024));
  expect_message(error_of<cnn::InputError>([&] { cnn::read_cifar10_batch(bomb, split); }), bomb,
                 "decompresses to more than 30730000 bytes, the most a CIFAR-10 batch holds");
  // The same bomb as a second member after a valid batch.
  Bytes two;
  const Bytes good = records(2, 9);
  write_gzip(dir.file("good.gz"), good);
  {
    std::ifstream in(dir.file("good.gz"), std::ios::binary);
    two.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const Bytes tail = cnn::test::gzip_bomb({}, 1024);
  two.insert(two.end(), tail.begin(), tail.end());
  const std::string second = dir.file("second_member.gz");
  write_file(second, two);
  expect_message(error_of<cnn::InputError>([&] { cnn::read_cifar10_batch(second, split); }), second,
                 "decompresses to more than 30730000 bytes");
}

BOOST_AUTO_TEST_CASE(batches_above_the_memory_available_refused_before_allocating) {
  TempDir dir;
  const Bytes batch = records(4, 2);  // 12292 bytes
  const std::string raw = dir.file("raw.bin");
  write_file(raw, batch);
  cnn::Dataset split;
  expect_message(error_of<cnn::IoError>([&] { cnn::read_cifar10_batch(raw, split, 12291); }), raw,
                 "file is 12292 bytes, more than the memory available (12291 bytes)");
  // gzip: the buffer starts at the trailer's size and never outgrows the memory given.
  const std::string gz = dir.file("batch.gz");
  write_gzip(gz, batch);
  expect_message(error_of<cnn::IoError>([&] { cnn::read_cifar10_batch(gz, split, 12291); }), gz,
                 "more than the memory available (12291 bytes)");
  cnn::read_cifar10_batch(gz, split, 1 << 20);
  BOOST_TEST(split.count() == 4);
}
