// gzip inflation in bounded steps, for the data readers (src/data/idx_reader.cpp, src/data/cifar_reader.cpp).
//
// A few MB of gzip can inflate to many GB, so nothing here inflates "everything, then look": the caller
// asks for a number of bytes it has already checked (against the format's limits and the memory
// available), and a stream that would give more is refused after one byte, not after the bulk.
// Private to src/.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cnn::gz {

// Deflate cannot expand data by more than about 1032:1 (258 bytes from a 2-bit code at best), so
// N compressed bytes never inflate to more than N * kMaxDeflateRatio, whatever a header claims.
inline constexpr std::uint64_t kMaxDeflateRatio = 1032;

bool has_gzip_magic(const std::vector<std::uint8_t>& bytes);

// Inflates the gzip members held in `compressed` (concatenated members form one stream, as gunzip
// reads them), on demand. Every error is an InputError naming `path`: corrupt deflate data or CRC,
// a stream that ends before its end marker ("truncated gzip stream"), or bytes after the last member
// that are not another member ("trailing bytes after the gzip stream").
class Stream {
 public:
  Stream(const std::vector<std::uint8_t>& compressed, const std::string& path);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Inflates up to `size` bytes into `out`; fewer only when the last member has ended (its CRC and
  // length checked) and no input is left.
  std::size_t read(std::uint8_t* out, std::size_t size);
  std::uint64_t produced() const { return produced_; }

 private:
  const std::vector<std::uint8_t>& in_;
  std::string path_;
  z_stream zs_{};
  std::size_t in_pos_ = 0;
  std::uint64_t produced_ = 0;
  bool finished_ = false;
};

// What a decompressed file may grow to: the format's limit (with its text for the message, e.g.
// "4 GiB (the limit)") and the memory available.
struct Bound {
  std::uint64_t max_bytes = 0;
  std::string max_text;
  std::uint64_t memory_available = 0;
};

// The whole stream, for formats without a header that gives the size (CIFAR-10). The buffer starts
// at the trailer's ISIZE (bounded by what deflate can produce from this input and by max_bytes) and
// doubles; it is refused, naming the file, as soon as the stream would pass bound.max_bytes
// ("decompresses to more than ...", InputError) or the buffer would outgrow bound.memory_available
// (IoError), before that memory is asked for.
std::vector<std::uint8_t> gunzip_bounded(const std::vector<std::uint8_t>& compressed, const std::string& path,
                                         const Bound& bound);

// "PATH: <what>, more than the memory available (N bytes)": IoError, exit 3 - the file may be good,
// this machine cannot hold it.
[[noreturn]] void throw_no_memory(const std::string& path, const std::string& what, std::uint64_t available);

}  // namespace cnn::gz
