// IDX reading: the whole file in one read, then a header check that trusts nothing before the data is
// copied out. A gzip file is inflated in two steps: the header first, then exactly the size it
// declares, once that size has passed the limits and fits in the memory available.
#include "cnn/idx_reader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <limits>
#include <sstream>
#include <utility>

#include "cnn/errors.hpp"
#include "io/fsync_util.hpp"
#include "data/gunzip.hpp"
#include "io/regular_file.hpp"

namespace cnn {
namespace {

// ---- IDX format constants ------------------------------------------------------------------------
constexpr std::size_t kIdxMagicBytes = 4;          // 0x00 0x00 <type> <ndims>
constexpr std::size_t kIdxTypeOffset = 2;
constexpr std::size_t kIdxRankOffset = 3;
constexpr std::size_t kIdxDimensionBytes = 4;      // one big-endian uint32 per dimension
constexpr std::uint8_t kIdxTypeUnsignedByte = 0x08;
constexpr int kImageDims = 3;                      // count, rows, cols
constexpr int kLabelDims = 1;                      // count
constexpr int kMaxClasses = 256;                   // labels are single bytes

// Neither a raw file nor a decompressed stream may exceed this: it stops a decompression bomb (or a
// header that claims billions of images) from exhausting memory. The largest real IDX set is ~50 MB.
constexpr std::uint64_t kMaxFileBytes = std::uint64_t{4} << 30;
constexpr const char* kMaxFileBytesText = "4 GiB";
constexpr const char* kMaxFileBytesLimitText = "the limit of 4 GiB";
// A gzip IDX file's data is inflated into its reserved buffer in steps of this many bytes.
constexpr std::uint64_t kInflateStep = std::uint64_t{16} << 20;

[[noreturn]] void throw_input(const std::string& path, const std::string& what) {
  throw InputError(path + ": " + what);
}

// One allocation and one read loop: the 26 MB Fashion-MNIST archive is read in a few system calls.
// Opened with O_NONBLOCK and refused unless a regular file (a FIFO would block open(2) forever), and
// refused above `max_bytes` or the memory available before the buffer is allocated.
std::vector<std::uint8_t> read_whole_file(const std::string& path, std::uint64_t max_bytes, const std::string& max_text,
                                          std::uint64_t memory_available) {
  const fsutil::ReadFd file = fsutil::open_regular_file(path);
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) throw IoError(path + ": cannot stat: " + fsutil::errno_text(errno));
  const auto size = static_cast<std::uint64_t>(info.st_size);
  if (size == 0) throw_input(path, "empty file");
  if (size > max_bytes) throw_input(path, "file is " + std::to_string(size) + " bytes, more than " + max_text);
  if (size > memory_available) gz::throw_no_memory(path, "file is " + std::to_string(size) + " bytes", memory_available);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  fsutil::read_exactly(file.get(), bytes.data(), bytes.size(), path);
  return bytes;
}

std::uint32_t read_big_endian_u32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | std::uint32_t{p[3]};
}

// The checked header of an IDX file: its dimensions and where the data starts.
struct IdxHeader {
  std::vector<std::uint32_t> dims;
  std::size_t data_offset = 0;
  std::uint64_t values = 0;  // product of dims == data bytes, since the type is uint8
};

// Everything but the data length: magic, type, dimensions, their product and its limit.
IdxHeader parse_header_fields(const std::vector<std::uint8_t>& bytes, const std::string& path, int expected_dims,
                              const char* kind) {
  if (bytes.empty()) throw_input(path, "empty file");
  if (bytes.size() < kIdxMagicBytes) {
    throw_input(path, "too short for an IDX header: " + std::to_string(bytes.size()) + " bytes, the magic alone is " +
                          std::to_string(kIdxMagicBytes));
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    std::ostringstream what;
    what << "bad magic number: first bytes are 0x" << std::hex << int{bytes[0]} << " 0x" << int{bytes[1]}
         << ", an IDX file starts with two zero bytes";
    if (gz::has_gzip_magic(bytes)) what << " (looks like gzip)";
    throw_input(path, what.str());
  }
  if (bytes[kIdxTypeOffset] != kIdxTypeUnsignedByte) {
    std::ostringstream what;
    what << "unsupported data type 0x" << std::hex << int{bytes[kIdxTypeOffset]} << ", only 0x"
         << int{kIdxTypeUnsignedByte} << " (unsigned byte) is supported";
    throw_input(path, what.str());
  }
  const int ndims = bytes[kIdxRankOffset];
  if (ndims != expected_dims) {
    throw_input(path, "has " + std::to_string(ndims) + " dimensions, expected " + std::to_string(expected_dims) +
                          " for " + kind);
  }

  IdxHeader header;
  header.data_offset = kIdxMagicBytes + kIdxDimensionBytes * static_cast<std::size_t>(ndims);
  if (bytes.size() < header.data_offset) {
    throw_input(path, "header shorter than its dimension list: " + std::to_string(ndims) + " dimensions need " +
                          std::to_string(header.data_offset) + " header bytes, the file has " +
                          std::to_string(bytes.size()));
  }
  std::int64_t product = 1;
  for (int d = 0; d < ndims; ++d) {
    const std::uint32_t dim = read_big_endian_u32(bytes.data() + kIdxMagicBytes + kIdxDimensionBytes * d);
    if (dim == 0) throw_input(path, "dimension " + std::to_string(d) + " is zero");
    if (__builtin_mul_overflow(product, static_cast<std::int64_t>(dim), &product)) {
      throw_input(path, "dimension product overflows 64 bits (dimension " + std::to_string(d) + " is " +
                            std::to_string(dim) + ")");
    }
    header.dims.push_back(dim);
  }
  header.values = static_cast<std::uint64_t>(product);
  if (header.values > kMaxFileBytes - header.data_offset) {
    throw_input(path, "dimensions give " + std::to_string(header.values) + " values, more than the limit of " +
                          kMaxFileBytesText);
  }
  return header;
}

void require_data_length(const IdxHeader& header, std::uint64_t found, const std::string& path) {
  if (found < header.values) {
    throw_input(path, "truncated: expected " + std::to_string(header.values) + " bytes of data, found " +
                          std::to_string(found));
  }
  if (found > header.values) {
    throw_input(path, "trailing bytes: expected " + std::to_string(header.values) + " bytes of data, found " +
                          std::to_string(found) + " (" + std::to_string(found - header.values) + " extra)");
  }
}

IdxHeader parse_header(const std::vector<std::uint8_t>& bytes, const std::string& path, int expected_dims,
                       const char* kind) {
  const IdxHeader header = parse_header_fields(bytes, path, expected_dims, kind);
  require_data_length(header, bytes.size() - header.data_offset, path);
  return header;
}

std::string dims_text(const IdxHeader& header) {
  std::string text;
  for (const std::uint32_t dim : header.dims) text += (text.empty() ? "" : "x") + std::to_string(dim);
  return text;
}

// A gzip IDX file, inflated in two steps: the header (at most 1024 bytes), then exactly the size it
// declares, once that passed the limits and the memory check. A stream that would give more is
// refused after one byte, so a bomb behind a small header costs no more than that header's size.
std::vector<std::uint8_t> gunzip_idx(const std::vector<std::uint8_t>& compressed, const std::string& path,
                                     int expected_dims, const char* kind, std::uint64_t memory_available) {
  gz::Stream stream(compressed, path);
  std::vector<std::uint8_t> head(kIdxMagicBytes);
  head.resize(stream.read(head.data(), head.size()));
  if (head.size() == kIdxMagicBytes) {
    const std::size_t dims_bytes = kIdxDimensionBytes * head[kIdxRankOffset];
    head.resize(kIdxMagicBytes + dims_bytes);
    head.resize(kIdxMagicBytes + stream.read(head.data() + kIdxMagicBytes, dims_bytes));
  }
  const IdxHeader header = parse_header_fields(head, path, expected_dims, kind);
  const std::uint64_t declared = header.data_offset + header.values;  // <= kMaxFileBytes: checked above
  // Deflate expands at most gz::kMaxDeflateRatio:1, so a header can claim more than its stream could
  // ever hold: that is known now, without inflating anything or reserving the claimed size.
  const std::uint64_t most = std::uint64_t{compressed.size()} * gz::kMaxDeflateRatio;
  if (declared > most) {
    throw_input(path, "truncated: expected " + std::to_string(header.values) + " bytes of data, but " +
                          std::to_string(compressed.size()) + " bytes of gzip inflate to at most " +
                          std::to_string(most) + " (deflate expands at most " +
                          std::to_string(gz::kMaxDeflateRatio) + ":1)");
  }
  if (declared > memory_available) {
    gz::throw_no_memory(path, "its header declares " + std::string(kind) + " " + dims_text(header) + ", " +
                                  std::to_string(declared) + " bytes decompressed",
                        memory_available);
  }
  // Reserved, then filled in steps: a header that declares more than the stream holds costs address
  // space (at most 1032 times the file), not memory (resize zero-fills, so one resize to the declared
  // size would touch it all).
  std::vector<std::uint8_t> bytes;
  bytes.reserve(static_cast<std::size_t>(declared));
  bytes.assign(head.begin(), head.begin() + static_cast<std::ptrdiff_t>(header.data_offset));
  std::uint64_t found = 0;
  while (found < header.values) {
    const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(header.values - found, kInflateStep));
    bytes.resize(bytes.size() + step);
    const std::size_t got = stream.read(bytes.data() + bytes.size() - step, step);
    found += got;
    if (got < step) break;
  }
  require_data_length(header, found, path);
  std::uint8_t next = 0;
  if (stream.read(&next, 1) != 0) {
    throw_input(path, "trailing bytes: the header declares " + std::to_string(header.values) +
                          " bytes of data, the gzip stream holds more (refused without inflating the rest)");
  }
  return bytes;
}

std::vector<std::uint8_t> read_idx_file(const std::string& path, int expected_dims, const char* kind,
                                        std::uint64_t memory_available) {
  std::vector<std::uint8_t> bytes = read_whole_file(path, kMaxFileBytes, kMaxFileBytesLimitText, memory_available);
  if (!gz::has_gzip_magic(bytes)) return bytes;
  return gunzip_idx(bytes, path, expected_dims, kind, memory_available);
}

// Both parsers take the bytes by value and drop the header in place: the readers move the file's
// buffer in, so the 47 MB of Fashion-MNIST pixels are never copied into a second allocation.
std::vector<std::uint8_t> data_after_header(std::vector<std::uint8_t> bytes, const IdxHeader& header) {
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header.data_offset));
  return bytes;
}

IdxImages take_idx_images(std::vector<std::uint8_t> bytes, const std::string& path) {
  const IdxHeader header = parse_header(bytes, path, kImageDims, "images");
  constexpr auto kMaxSide = static_cast<std::uint32_t>(std::numeric_limits<int>::max());
  if (header.dims[1] > kMaxSide || header.dims[2] > kMaxSide) {
    throw_input(path, "image size " + std::to_string(header.dims[1]) + "x" + std::to_string(header.dims[2]) +
                          " does not fit an int");
  }
  IdxImages images;
  images.count = header.dims[0];
  images.rows = static_cast<int>(header.dims[1]);
  images.cols = static_cast<int>(header.dims[2]);
  images.pixels = data_after_header(std::move(bytes), header);
  return images;
}

std::vector<std::uint8_t> take_idx_labels(std::vector<std::uint8_t> bytes, const std::string& path,
                                          int num_classes) {
  if (num_classes < 1 || num_classes > kMaxClasses) {
    throw UsageError(path + ": number of classes " + std::to_string(num_classes) + " is not in 1.." +
                     std::to_string(kMaxClasses));
  }
  const IdxHeader header = parse_header(bytes, path, kLabelDims, "labels");
  std::vector<std::uint8_t> labels = data_after_header(std::move(bytes), header);
  const auto bad = std::find_if(labels.begin(), labels.end(), [num_classes](std::uint8_t label) {
    return label >= num_classes;
  });
  if (bad != labels.end()) {
    throw_input(path, "label " + std::to_string(*bad) + " at index " + std::to_string(bad - labels.begin()) +
                          " is not below " + std::to_string(num_classes));
  }
  return labels;
}

}  // namespace

std::vector<std::uint8_t> read_file_maybe_gzip(const std::string& path, std::uint64_t max_bytes,
                                               const std::string& max_text, std::uint64_t memory_available) {
  std::vector<std::uint8_t> bytes = read_whole_file(path, max_bytes, max_text, memory_available);
  if (!gz::has_gzip_magic(bytes)) return bytes;
  return gz::gunzip_bounded(bytes, path, gz::Bound{max_bytes, max_text, memory_available});
}

std::vector<std::uint8_t> read_file_maybe_gzip(const std::string& path) {
  return read_file_maybe_gzip(path, kMaxFileBytes, kMaxFileBytesLimitText, memory_available_bytes());
}

IdxImages parse_idx_images(const std::vector<std::uint8_t>& bytes, const std::string& path) {
  return take_idx_images(bytes, path);
}

std::vector<std::uint8_t> parse_idx_labels(const std::vector<std::uint8_t>& bytes, const std::string& path,
                                           int num_classes) {
  return take_idx_labels(bytes, path, num_classes);
}

IdxImages read_idx_images(const std::string& path, std::uint64_t memory_available) {
  return take_idx_images(read_idx_file(path, kImageDims, "images", memory_available), path);
}

std::vector<std::uint8_t> read_idx_labels(const std::string& path, int num_classes, std::uint64_t memory_available) {
  return take_idx_labels(read_idx_file(path, kLabelDims, "labels", memory_available), path, num_classes);
}

std::string find_idx_file(const std::string& dir, const std::string& name) {
  const std::string raw = dir + "/" + name;
  const std::string gz = raw + ".gz";
  struct stat info {};
  if (::stat(raw.c_str(), &info) == 0) return raw;
  if (::stat(gz.c_str(), &info) == 0) return gz;
  throw IoError(raw + ": file does not exist (nor " + gz + ")");
}

}  // namespace cnn
