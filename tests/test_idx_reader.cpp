#define BOOST_TEST_MODULE idx_reader
#include "boost_test.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "cnn/dataset.hpp"
#include "cnn/errors.hpp"
#include "cnn/idx_reader.hpp"
#include "data_hazards.hpp"
#include "test_files.hpp"

namespace {

using cnn::test::error_of;
using cnn::test::TempDir;

using Bytes = std::vector<std::uint8_t>;

constexpr const char* kFashionDir = "/usr/share/datasets/fashion-mnist";
constexpr const char* kMnistSubdir = "/data/mnist";
constexpr const char* kDefaultSharedDir = "/work/shared";
constexpr std::uint8_t kTypeUnsignedByte = 0x08;
constexpr int kClasses = 10;

std::string mnist_dir() {
  const char* shared = std::getenv("CNN_SHARED_DIR");
  return std::string(shared != nullptr && *shared != '\0' ? shared : kDefaultSharedDir) + kMnistSubdir;
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// Skips a real-data test case (reported as skipped, not failed) when its directory is absent.
struct DataInstalled {
  std::string what;
  std::string dir;
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    if (is_directory(dir)) return true;
    const std::string message = "SKIP: " + what + " not installed at " + dir;
    BOOST_TEST_MESSAGE(message);
    // Also at the default log level, so a skip is never mistaken for a pass in a CTest log.
    std::cout << message << std::endl;
    boost::test_tools::assertion_result result(false);
    result.message() << message;
    return result;
  }
};

void append_be32(Bytes& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(value >> shift));
}

// An IDX header: 0 0 type ndims, then one big-endian uint32 per dimension.
Bytes idx_header(const std::vector<std::uint32_t>& dims, std::uint8_t type = kTypeUnsignedByte) {
  Bytes out = {0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (const std::uint32_t d : dims) append_be32(out, d);
  return out;
}

Bytes idx_file(const std::vector<std::uint32_t>& dims, const Bytes& data) {
  Bytes out = idx_header(dims);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes pattern_bytes(std::size_t n, int modulus) {
  Bytes out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint8_t>((i * 7 + 3) % modulus);
  return out;
}

void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile out = gzopen(path.c_str(), "wb");
  if (out == nullptr) throw std::runtime_error("gzopen failed for " + path);
  const int written = gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size()));
  if (gzclose(out) != Z_OK || written != static_cast<int>(bytes.size())) {
    throw std::runtime_error("gzwrite failed for " + path);
  }
}

Bytes read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The message must name the file first, then say what is wrong.
void check_message(const std::string& message, const std::string& path, const std::string& what) {
  BOOST_TEST_CONTEXT("message: \"" << message << "\", expected \"" << what << "\"") {
    BOOST_TEST(message.rfind(path, 0) == 0);
    BOOST_TEST(message.find(what) != std::string::npos);
    BOOST_TEST(message.find('\n') == std::string::npos);
  }
}

template <typename Expected>
void expect_bad_images(const TempDir& dir, const std::string& name, const Bytes& bytes, const std::string& what) {
  const std::string path = dir.file(name);
  write_raw(path, bytes);
  check_message(error_of<Expected>([&] { cnn::read_idx_images(path); }), path, what);
}

template <typename Expected>
void expect_bad_labels(const TempDir& dir, const std::string& name, const Bytes& bytes, const std::string& what) {
  const std::string path = dir.file(name);
  write_raw(path, bytes);
  check_message(error_of<Expected>([&] { cnn::read_idx_labels(path, kClasses); }), path, what);
}

std::array<std::int64_t, kClasses> histogram(const Bytes& labels) {
  std::array<std::int64_t, kClasses> counts{};
  for (const std::uint8_t label : labels) ++counts.at(label);
  return counts;
}

// Writes a small valid split pair ("train" or "t10k") into dir.
void write_split(const TempDir& dir, const std::string& prefix, std::uint32_t images, std::uint32_t labels) {
  write_raw(dir.file(prefix + "-images-idx3-ubyte"), idx_file({images, 4, 5}, pattern_bytes(images * 20, 256)));
  write_raw(dir.file(prefix + "-labels-idx1-ubyte"), idx_file({labels}, pattern_bytes(labels, kClasses)));
}

}  // namespace

// ---- real data -------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(fashion_mnist_counts_and_histogram,
                     *boost::unit_test::precondition(DataInstalled{"Fashion-MNIST", kFashionDir})) {
  const auto start = std::chrono::steady_clock::now();
  const cnn::DataSplits data = cnn::load_dataset("fashion", kFashionDir);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BOOST_TEST_MESSAGE("Fashion-MNIST loaded in " << seconds << " s, digest " << std::hex << data.digest());

  BOOST_TEST(data.train.name == "fashion/train");
  BOOST_TEST(data.test.name == "fashion/test");
  BOOST_TEST(data.train.count() == 60000);
  BOOST_TEST(data.test.count() == 10000);
  for (const cnn::Dataset* split : {&data.train, &data.test}) {
    BOOST_TEST(split->shape.channels == 1);
    BOOST_TEST(split->shape.height == 28);
    BOOST_TEST(split->shape.width == 28);
    BOOST_TEST(split->classes == kClasses);
    BOOST_TEST(static_cast<std::int64_t>(split->images.size()) == split->count() * 28 * 28);
  }
  for (const std::int64_t n : histogram(data.train.labels)) BOOST_TEST(n == 6000);
  for (const std::int64_t n : histogram(data.test.labels)) BOOST_TEST(n == 1000);
}

BOOST_AUTO_TEST_CASE(original_mnist_counts_and_histogram,
                     *boost::unit_test::precondition(DataInstalled{"MNIST", mnist_dir()})) {
  const cnn::DataSplits data = cnn::load_dataset("mnist", mnist_dir());
  BOOST_TEST(data.train.name == "mnist/train");
  BOOST_TEST(data.train.count() == 60000);
  BOOST_TEST(data.test.count() == 10000);
  BOOST_TEST(data.train.shape.height == 28);
  BOOST_TEST(data.train.shape.width == 28);
  const std::array<std::int64_t, kClasses> expected = {5923, 6742, 5958, 6131, 5842,
                                                       5421, 5918, 6265, 5851, 5949};
  const std::array<std::int64_t, kClasses> counts = histogram(data.train.labels);
  BOOST_TEST(counts == expected, boost::test_tools::per_element());
}

// ---- round trips -----------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(raw_and_gzip_round_trip_byte_identical) {
  TempDir dir;
  const std::uint32_t count = 37;
  const Bytes pixels = pattern_bytes(count * 3 * 5, 256);
  const Bytes labels = pattern_bytes(count, kClasses);
  write_raw(dir.file("images"), idx_file({count, 3, 5}, pixels));
  write_raw(dir.file("labels"), idx_file({count}, labels));
  // Detection is by magic bytes, so the name need not end in .gz.
  write_gzip(dir.file("images.gz"), idx_file({count, 3, 5}, pixels));
  write_gzip(dir.file("labels-compressed"), idx_file({count}, labels));

  for (const std::string name : {"images", "images.gz"}) {
    const cnn::IdxImages images = cnn::read_idx_images(dir.file(name));
    BOOST_TEST(images.count == count);
    BOOST_TEST(images.rows == 3);
    BOOST_TEST(images.cols == 5);
    BOOST_TEST(images.pixels == pixels, boost::test_tools::per_element());
  }
  for (const std::string name : {"labels", "labels-compressed"}) {
    BOOST_TEST(cnn::read_idx_labels(dir.file(name), kClasses) == labels, boost::test_tools::per_element());
  }
  BOOST_TEST(cnn::read_file_maybe_gzip(dir.file("images.gz")) == read_raw(dir.file("images")),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(load_dataset_from_temp_dir_finds_raw_and_gz) {
  TempDir dir;
  write_split(dir, "train", 12, 12);
  const Bytes test_pixels = pattern_bytes(6 * 20, 251);
  write_gzip(dir.file("t10k-images-idx3-ubyte.gz"), idx_file({6, 4, 5}, test_pixels));
  write_gzip(dir.file("t10k-labels-idx1-ubyte.gz"), idx_file({6}, pattern_bytes(6, kClasses)));

  cnn::DataSplits data = cnn::load_dataset("mnist", dir.path);
  BOOST_TEST(data.train.count() == 12);
  BOOST_TEST(data.test.count() == 6);
  BOOST_TEST(data.test.shape.channels == 1);
  BOOST_TEST(data.test.shape.height == 4);
  BOOST_TEST(data.test.shape.width == 5);
  BOOST_TEST(data.test.images == test_pixels, boost::test_tools::per_element());
  BOOST_TEST(data.test.image(1)[0] == test_pixels[20]);

  // The digest sees every byte and the order of the splits.
  const std::uint64_t before = data.digest();
  BOOST_TEST(before == cnn::load_dataset("mnist", dir.path).digest());
  data.test.images.back() ^= 1;
  BOOST_TEST(data.digest() != before);
  data.test.images.back() ^= 1;
  std::swap(data.train, data.test);
  BOOST_TEST(data.digest() != before);

  cnn::Dataset train = cnn::load_dataset("mnist", dir.path).train;
  train.truncate(5);
  BOOST_TEST(train.count() == 5);
  BOOST_TEST(train.images.size() == 5u * 20u);
  check_message(error_of<cnn::UsageError>([&] { train.truncate(6); }), "mnist/train", "cannot keep 6");
}

BOOST_AUTO_TEST_CASE(digest_is_fnv1a_over_labels_then_images) {
  cnn::DataSplits data;
  data.train.labels = {1};
  data.train.images = {2};
  data.test.labels = {3};
  data.test.images = {4};
  // FNV-1a 64 of the bytes 01 02 03 04, computed independently.
  std::uint64_t hash = 14695981039346656037ULL;
  for (const std::uint8_t byte : {1, 2, 3, 4}) hash = (hash ^ byte) * 1099511628211ULL;
  BOOST_TEST(data.digest() == hash);
}

// ---- malformed files: each with its own message ----------------------------------------------------

BOOST_AUTO_TEST_CASE(malformed_headers_rejected) {
  TempDir dir;
  Bytes bad_magic = idx_file({2}, {0, 1});
  bad_magic[0] = 0x12;
  expect_bad_labels<cnn::InputError>(dir, "magic", bad_magic, "bad magic number");
  expect_bad_labels<cnn::InputError>(dir, "type", [] {
    Bytes b = idx_header({2}, 0x0D);
    b.insert(b.end(), 8, 0);
    return b;
  }(), "unsupported data type 0xd");
  expect_bad_images<cnn::InputError>(dir, "ndims", idx_file({2, 3}, Bytes(6)), "has 2 dimensions, expected 3");
  expect_bad_labels<cnn::InputError>(dir, "empty", {}, "empty file");
  expect_bad_labels<cnn::InputError>(dir, "tiny", {0, 0}, "too short for an IDX header");
  Bytes short_dims = idx_header({10, 28, 28});
  short_dims.resize(10);
  expect_bad_images<cnn::InputError>(dir, "short_dims", short_dims, "header shorter than its dimension list");
  expect_bad_images<cnn::InputError>(dir, "zero_dim", idx_header({5, 0, 28}), "dimension 1 is zero");
  expect_bad_images<cnn::InputError>(dir, "overflow", idx_header({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}),
                                     "dimension product overflows");
  expect_bad_images<cnn::InputError>(dir, "huge", idx_header({0xFFFFFFFFu, 28, 28}), "more than the limit");
}

BOOST_AUTO_TEST_CASE(malformed_lengths_and_labels_rejected) {
  TempDir dir;
  expect_bad_images<cnn::InputError>(dir, "truncated", idx_file({3, 2, 2}, Bytes(11)),
                                     "truncated: expected 12 bytes of data, found 11");
  expect_bad_images<cnn::InputError>(dir, "trailing", idx_file({3, 2, 2}, Bytes(13)), "trailing bytes");
  expect_bad_labels<cnn::InputError>(dir, "label", idx_file({8}, {0, 1, 2, 3, 4, 12, 6, 7}),
                                     "label 12 at index 5 is not below 10");
  expect_bad_labels<cnn::InputError>(dir, "label10", idx_file({1}, {10}), "label 10 at index 0 is not below 10");
}

BOOST_AUTO_TEST_CASE(malformed_gzip_rejected) {
  TempDir dir;
  // A valid gzip header (magic, deflate, no flags, mtime, xfl, OS) followed by garbage: 0xff starts a
  // final block of the reserved type 3.
  Bytes corrupt = {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0x03};
  corrupt.insert(corrupt.end(), 64, 0xff);
  expect_bad_labels<cnn::InputError>(dir, "corrupt.gz", corrupt, "corrupt gzip stream");

  write_gzip(dir.file("whole.gz"), idx_file({4000}, pattern_bytes(4000, kClasses)));
  Bytes whole = read_raw(dir.file("whole.gz"));
  Bytes cut(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(whole.size() / 2));
  expect_bad_labels<cnn::InputError>(dir, "truncated.gz", cut, "truncated gzip stream");
  // Losing only the CRC/size trailer must be caught too.
  Bytes no_trailer(whole.begin(), whole.end() - 4);
  expect_bad_labels<cnn::InputError>(dir, "no_trailer.gz", no_trailer, "truncated gzip stream");

  Bytes garbage_after = whole;
  garbage_after.insert(garbage_after.end(), {0xde, 0xad});
  expect_bad_labels<cnn::InputError>(dir, "garbage_after.gz", garbage_after, "trailing bytes after the gzip");

  // A bad checksum is corruption, whatever the deflate data says.
  Bytes bad_crc = whole;
  bad_crc[bad_crc.size() - 8] ^= 0xff;
  expect_bad_labels<cnn::InputError>(dir, "bad_crc.gz", bad_crc, "corrupt gzip stream");

  // Concatenated members form one file, as gunzip reads them.
  const Bytes first = idx_header({6});
  const Bytes second = {1, 2, 3, 4, 5, 6};
  write_gzip(dir.file("a.gz"), first);
  write_gzip(dir.file("b.gz"), second);
  Bytes both = read_raw(dir.file("a.gz"));
  const Bytes tail = read_raw(dir.file("b.gz"));
  both.insert(both.end(), tail.begin(), tail.end());
  write_raw(dir.file("both.gz"), both);
  BOOST_TEST(cnn::read_idx_labels(dir.file("both.gz"), kClasses) == second, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(unreadable_paths_rejected) {
  TempDir dir;
  const std::string sub = dir.file("subdir");
  BOOST_REQUIRE(::mkdir(sub.c_str(), 0700) == 0);
  check_message(error_of<cnn::IoError>([&] { cnn::read_idx_images(sub); }), sub, "is a directory");
  const std::string missing = dir.file("missing");
  check_message(error_of<cnn::IoError>([&] { cnn::read_idx_labels(missing, kClasses); }), missing,
                "does not exist");
  check_message(error_of<cnn::IoError>([&] { cnn::find_idx_file(dir.path, "nothing"); }), dir.file("nothing"),
                "nothing.gz");
}

BOOST_AUTO_TEST_CASE(load_dataset_rejects_bad_sets) {
  TempDir dir;
  const std::string absent = dir.file("absent");
  check_message(error_of<cnn::IoError>([&] { cnn::load_dataset("fashion", absent); }), absent,
                "data directory does not exist");

  const std::string unknown = error_of<cnn::UsageError>([&] { cnn::load_dataset("imagenet", dir.path); });
  BOOST_TEST_CONTEXT("message: " << unknown) {
    BOOST_TEST(unknown.find("imagenet") != std::string::npos);
    BOOST_TEST(unknown.find("mnist, fashion") != std::string::npos);
  }

  write_split(dir, "train", 5, 4);
  const std::string mismatch = error_of<cnn::InputError>([&] { cnn::load_dataset("fashion", dir.path); });
  check_message(mismatch, dir.file("train-images-idx3-ubyte"), "holds 5 images but");
  BOOST_TEST(mismatch.find(dir.file("train-labels-idx1-ubyte") + " holds 4 labels") != std::string::npos);

  write_split(dir, "train", 5, 5);
  write_split(dir, "t10k", 2, 2);
  write_raw(dir.file("t10k-images-idx3-ubyte"), idx_file({2, 5, 4}, Bytes(40)));
  check_message(error_of<cnn::InputError>([&] { cnn::load_dataset("fashion", dir.path); }),
                dir.file("t10k-images-idx3-ubyte"), "images are 5x4 but the training images are 4x5");
}

// ---- non-regular files and gzip bombs (issue 22) -----------------------------------------------------

BOOST_AUTO_TEST_CASE(non_regular_files_refused_without_blocking) {
  const cnn::test::HangGuard guard;  // a reader blocking in open(2) on the FIFO fails here, not hangs
  TempDir dir;
  for (const cnn::test::NonRegular& thing : cnn::test::kNonRegularKinds) {
    BOOST_TEST_CONTEXT(thing.kind) {
      const std::string path = dir.file(std::string("train-images-idx3-ubyte.") + thing.kind);
      cnn::test::make_non_regular(path, thing.kind);
      check_message(error_of<cnn::IoError>([&] { cnn::read_idx_images(path); }), path, thing.message);
      check_message(error_of<cnn::IoError>([&] { cnn::read_idx_labels(path, kClasses); }), path, thing.message);
      check_message(error_of<cnn::IoError>([&] { cnn::read_file_maybe_gzip(path); }), path, thing.message);
    }
  }
  // Through load_dataset, under each of the four names (raw and .gz).
  for (const std::string name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                                 "t10k-labels-idx1-ubyte"}) {
    TempDir set;
    write_split(set, "train", 5, 5);
    write_split(set, "t10k", 2, 2);
    const std::string raw = name.substr(0, name.find(".gz"));
    BOOST_REQUIRE(::unlink(set.file(raw).c_str()) == 0);
    cnn::test::make_non_regular(set.file(name), "fifo");
    check_message(error_of<cnn::IoError>([&] { cnn::load_dataset("mnist", set.path); }), set.file(name),
                  "is a FIFO (named pipe)");
  }
}

// A gzip IDX file whose header declares a small size, followed by 1 GiB of zeros: refused one byte
// past the declared size. Had the bulk been inflated, the bomb's CRC (wrong on purpose) would have
// been met first and the message would be "corrupt gzip stream: incorrect data check".
BOOST_AUTO_TEST_CASE(gzip_bomb_behind_a_small_header_refused_at_the_declared_size) {
  TempDir dir;
  const std::string path = dir.file("bomb.gz");
  write_raw(path, cnn::test::gzip_bomb(idx_file({200}, Bytes(200)), 1024));
  BOOST_TEST(read_raw(path).size() < std::size_t{2} << 20);
  check_message(error_of<cnn::InputError>([&] { cnn::read_idx_labels(path, kClasses); }), path,
                "trailing bytes: the header declares 200 bytes of data, the gzip stream holds more");
  // The same bomb as a second gzip member after a complete, valid one.
  Bytes two = cnn::test::gzip_bomb(idx_file({6}, {1, 2, 3, 4, 5, 6}), 0);
  const Bytes bomb = cnn::test::gzip_bomb({}, 1024);
  two.insert(two.end(), bomb.begin(), bomb.end());
  const std::string second = dir.file("second_member.gz");
  write_raw(second, two);
  check_message(error_of<cnn::InputError>([&] { cnn::read_idx_labels(second, kClasses); }), second,
                "trailing bytes: the header declares 6 bytes of data");
}

// A header declaring 2^40 bytes is refused from the header alone, before any allocation or inflation
// of what follows (1 GiB of zeros with a wrong CRC, as above).
BOOST_AUTO_TEST_CASE(gzip_header_declaring_more_than_the_limit_refused_from_the_header) {
  TempDir dir;
  const std::string path = dir.file("huge.gz");
  write_raw(path, cnn::test::gzip_bomb(idx_header({1u << 20, 1024, 1024}), 1024));
  check_message(error_of<cnn::InputError>([&] { cnn::read_idx_images(path); }), path,
                "dimensions give 1099511627776 values, more than the limit of 4 GiB");
}

BOOST_AUTO_TEST_CASE(declared_size_above_the_memory_available_refused_before_allocating) {
  TempDir dir;
  const std::string gz = dir.file("images.gz");
  write_gzip(gz, idx_file({200, 28, 28}, pattern_bytes(200 * 28 * 28, 256)));
  // The header gives 16 + 156800 bytes; with less memory than that the file is refused, exit 3.
  check_message(error_of<cnn::IoError>([&] { cnn::read_idx_images(gz, 156815); }), gz,
                "its header declares images 200x28x28, 156816 bytes decompressed, more than the memory available "
                "(156815 bytes)");
  BOOST_TEST(cnn::read_idx_images(gz, 156816).count == 200);
  const std::string raw = dir.file("labels");
  write_raw(raw, idx_file({100}, pattern_bytes(100, kClasses)));
  check_message(error_of<cnn::IoError>([&] { cnn::read_idx_labels(raw, kClasses, 107); }), raw,
                "file is 108 bytes, more than the memory available (107 bytes)");
  // The system's own figure: MemAvailable (or a cgroup's room), never "unknown" on Linux.
  const std::uint64_t available = cnn::memory_available_bytes();
  BOOST_TEST(available > 0u);
  BOOST_TEST(available < std::numeric_limits<std::uint64_t>::max());
}

BOOST_AUTO_TEST_CASE(gzip_shorter_than_its_header_declares_is_truncated) {
  TempDir dir;
  const std::string path = dir.file("short.gz");
  write_gzip(path, idx_file({3, 2, 2}, Bytes(11)));
  check_message(error_of<cnn::InputError>([&] { cnn::read_idx_images(path); }), path,
                "truncated: expected 12 bytes of data, found 11");
  // More than deflate could give from this file (1032:1): refused from the header, nothing reserved.
  const std::string liar = dir.file("liar.gz");
  Bytes liar_bytes = idx_header({1u << 28});
  liar_bytes.insert(liar_bytes.end(), 10, 1);
  write_gzip(liar, liar_bytes);
  check_message(error_of<cnn::InputError>([&] { cnn::read_idx_labels(liar, kClasses); }), liar,
                "truncated: expected 268435456 bytes of data, but " + std::to_string(read_raw(liar).size()) +
                    " bytes of gzip inflate to at most");
  const std::string header_only = dir.file("header_only.gz");
  write_gzip(header_only, Bytes{0, 0, 8, 3, 0, 0});
  check_message(error_of<cnn::InputError>([&] { cnn::read_idx_images(header_only); }), header_only,
                "header shorter than its dimension list");
  // A generic read (no header) of a stream past its limit stops one byte past it.
  const std::string zeros = dir.file("zeros.gz");
  write_raw(zeros, cnn::test::gzip_bomb({}, 64));
  check_message(error_of<cnn::InputError>(
                    [&] { cnn::read_file_maybe_gzip(zeros, std::uint64_t{1} << 20, "the limit of 1 MiB", 1u << 30); }),
                zeros, "decompresses to more than the limit of 1 MiB; refusing a possible decompression bomb");
  check_message(error_of<cnn::IoError>([&] { cnn::read_file_maybe_gzip(zeros, std::uint64_t{1} << 30, "1 GiB", 1u << 20); }),
                zeros, "more than the memory available (1048576 bytes)");
}
