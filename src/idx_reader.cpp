// IDX reading: the whole file in one read, gunzip in memory when it carries the gzip magic, then a
// header check that trusts nothing before the data is copied out.
#include "cnn/idx_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <limits>
#include <sstream>
#include <system_error>
#include <utility>

#include "cnn/errors.hpp"

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

// ---- gzip constants ------------------------------------------------------------------------------
constexpr std::uint8_t kGzipMagic0 = 0x1f;
constexpr std::uint8_t kGzipMagic1 = 0x8b;
constexpr std::size_t kGzipTrailerBytes = 8;       // CRC32, then ISIZE (uncompressed size mod 2^32)
// windowBits 15 (the largest window) + 32: let zlib detect the gzip (or zlib) wrapper itself.
constexpr int kInflateWindowBits = 15 + 32;
// Deflate cannot expand data by more than about 1032:1, so the gzip size bounds the first guess of
// the output size even when ISIZE lies.
constexpr std::uint64_t kMaxDeflateRatio = 1032;
constexpr std::size_t kMinOutputGuess = std::size_t{1} << 16;
// zlib counts in uInt; feed and drain it in chunks that fit.
constexpr std::size_t kMaxZlibChunk = std::size_t{1} << 30;

// Neither a raw file nor a decompressed stream may exceed this: it stops a decompression bomb (or a
// header that claims billions of images) from exhausting memory. The largest real IDX set is ~50 MB.
constexpr std::uint64_t kMaxFileBytes = std::uint64_t{4} << 30;
constexpr const char* kMaxFileBytesText = "4 GiB";

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

[[noreturn]] void throw_input(const std::string& path, const std::string& what) {
  throw InputError(path + ": " + what);
}

[[noreturn]] void throw_io(const std::string& path, const std::string& what) { throw IoError(path + ": " + what); }

// Closes the descriptor on every path out of read_whole_file.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// One allocation and one read loop (read(2) may return less than asked): the 26 MB Fashion-MNIST
// archive is read in a few system calls.
std::vector<std::uint8_t> read_whole_file(const std::string& path) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) {
    const int error = errno;
    if (error == ENOENT) throw_io(path, "file does not exist");
    throw_io(path, "cannot open: " + errno_text(error));
  }
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) throw_io(path, "cannot stat: " + errno_text(errno));
  if (S_ISDIR(info.st_mode)) throw_io(path, "is a directory, expected a file");
  if (!S_ISREG(info.st_mode)) throw_io(path, "is not a regular file");
  const auto size = static_cast<std::uint64_t>(info.st_size);
  if (size == 0) throw_input(path, "empty file");
  if (size > kMaxFileBytes) {
    throw_input(path, "file is " + std::to_string(size) + " bytes, more than the limit of " + kMaxFileBytesText);
  }

  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(file.get(), bytes.data() + done, bytes.size() - done);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_io(path, "read failed: " + errno_text(errno));
    }
    if (got == 0) {
      throw_io(path, "file shrank while being read: got " + std::to_string(done) + " of " +
                         std::to_string(bytes.size()) + " bytes");
    }
    done += static_cast<std::size_t>(got);
  }
  return bytes;
}

bool has_gzip_magic(const std::vector<std::uint8_t>& bytes) {
  return bytes.size() >= 2 && bytes[0] == kGzipMagic0 && bytes[1] == kGzipMagic1;
}

// First output size: the gzip trailer's ISIZE (exact for one member under 4 GiB), bounded by what
// deflate can produce from this many bytes so that a forged ISIZE cannot force a huge allocation.
std::size_t initial_output_guess(const std::vector<std::uint8_t>& compressed) {
  std::uint64_t guess = kMinOutputGuess;
  if (compressed.size() >= kGzipTrailerBytes) {
    const std::uint8_t* isize = compressed.data() + compressed.size() - 4;
    guess = std::uint64_t{isize[0]} | std::uint64_t{isize[1]} << 8 | std::uint64_t{isize[2]} << 16 |
            std::uint64_t{isize[3]} << 24;
  }
  guess = std::min<std::uint64_t>(guess, compressed.size() * kMaxDeflateRatio);
  guess = std::min<std::uint64_t>(guess, kMaxFileBytes);
  return static_cast<std::size_t>(std::max<std::uint64_t>(guess, kMinOutputGuess));
}

// Frees zlib's state on every path out of gunzip.
class Inflater {
 public:
  explicit Inflater(const std::string& path) {
    if (inflateInit2(&stream_, kInflateWindowBits) != Z_OK) {
      throw_input(path, std::string("zlib inflateInit2 failed: ") + (stream_.msg ? stream_.msg : "?"));
    }
  }
  ~Inflater() { inflateEnd(&stream_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  z_stream& stream() { return stream_; }

 private:
  z_stream stream_{};
};

// Decompresses every gzip member (concatenated members form one file, as gunzip treats them).
// A stream that stops before its end marker is an error, never silently short data.
std::vector<std::uint8_t> gunzip(const std::vector<std::uint8_t>& compressed, const std::string& path) {
  std::vector<std::uint8_t> out(initial_output_guess(compressed));
  Inflater inflater(path);
  z_stream& zs = inflater.stream();
  std::size_t in_pos = 0;
  std::size_t out_pos = 0;
  while (true) {
    if (out_pos == out.size()) {
      if (out.size() >= kMaxFileBytes) {
        throw_input(path, std::string("decompresses to more than ") + kMaxFileBytesText +
                              " (the limit); refusing a possible decompression bomb");
      }
      out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(std::uint64_t{out.size()} * 2, kMaxFileBytes)));
    }
    const std::size_t in_chunk = std::min(compressed.size() - in_pos, kMaxZlibChunk);
    const std::size_t out_chunk = std::min(out.size() - out_pos, kMaxZlibChunk);
    // zlib's API is not const-correct; inflate only reads next_in.
    zs.next_in = const_cast<Bytef*>(compressed.data() + in_pos);
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = out.data() + out_pos;
    zs.avail_out = static_cast<uInt>(out_chunk);
    const int status = inflate(&zs, Z_NO_FLUSH);
    in_pos += in_chunk - zs.avail_in;
    out_pos += out_chunk - zs.avail_out;

    if (status == Z_STREAM_END) {
      if (in_pos == compressed.size()) break;
      const bool another_member = compressed.size() - in_pos >= 2 && compressed[in_pos] == kGzipMagic0 &&
                                  compressed[in_pos + 1] == kGzipMagic1;
      if (!another_member) {
        throw_input(path, "trailing bytes after the gzip stream: " + std::to_string(compressed.size() - in_pos) +
                              " bytes that are not a gzip member");
      }
      inflateReset(&zs);
      continue;
    }
    if (status == Z_DATA_ERROR || status == Z_NEED_DICT) {
      throw_input(path, std::string("corrupt gzip stream: ") + (zs.msg ? zs.msg : "invalid deflate data") +
                            " at compressed byte " + std::to_string(in_pos));
    }
    if (status == Z_MEM_ERROR) throw_input(path, "zlib ran out of memory while decompressing");
    // Output space is never zero here, so "no progress possible" means the input ran out.
    if (status == Z_BUF_ERROR && in_pos == compressed.size()) {
      throw_input(path, "truncated gzip stream: input ends after " + std::to_string(compressed.size()) +
                            " compressed bytes (" + std::to_string(out_pos) +
                            " decompressed) before the end of the stream");
    }
    if (status != Z_OK) {
      throw_input(path, "zlib inflate failed with status " + std::to_string(status));
    }
  }
  out.resize(out_pos);
  return out;
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

IdxHeader parse_header(const std::vector<std::uint8_t>& bytes, const std::string& path, int expected_dims,
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
    if (has_gzip_magic(bytes)) what << " (looks like gzip)";
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

  const std::uint64_t found = bytes.size() - header.data_offset;
  if (found < header.values) {
    throw_input(path, "truncated: expected " + std::to_string(header.values) + " bytes of data, found " +
                          std::to_string(found));
  }
  if (found > header.values) {
    throw_input(path, "trailing bytes: expected " + std::to_string(header.values) + " bytes of data, found " +
                          std::to_string(found) + " (" + std::to_string(found - header.values) + " extra)");
  }
  return header;
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

std::vector<std::uint8_t> read_file_maybe_gzip(const std::string& path) {
  std::vector<std::uint8_t> bytes = read_whole_file(path);
  if (!has_gzip_magic(bytes)) return bytes;
  return gunzip(bytes, path);
}

IdxImages parse_idx_images(const std::vector<std::uint8_t>& bytes, const std::string& path) {
  return take_idx_images(bytes, path);
}

std::vector<std::uint8_t> parse_idx_labels(const std::vector<std::uint8_t>& bytes, const std::string& path,
                                           int num_classes) {
  return take_idx_labels(bytes, path, num_classes);
}

IdxImages read_idx_images(const std::string& path) { return take_idx_images(read_file_maybe_gzip(path), path); }

std::vector<std::uint8_t> read_idx_labels(const std::string& path, int num_classes) {
  return take_idx_labels(read_file_maybe_gzip(path), path, num_classes);
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
