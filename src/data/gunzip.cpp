// Bounded gzip inflation (src/data/gunzip.hpp) and the memory a reader may still ask for
// (include/cnn/idx_reader.hpp, memory_available_bytes).
#include "data/gunzip.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "cnn/errors.hpp"
#include "cnn/idx_reader.hpp"

namespace cnn {
namespace gz {
namespace {

constexpr std::uint8_t kGzipMagic0 = 0x1f;
constexpr std::uint8_t kGzipMagic1 = 0x8b;
constexpr std::size_t kGzipTrailerBytes = 8;  // CRC32, then ISIZE (uncompressed size mod 2^32)
// windowBits 15 (the largest window) + 32: let zlib detect the gzip (or zlib) wrapper itself.
constexpr int kInflateWindowBits = 15 + 32;
constexpr std::size_t kMinOutputGuess = std::size_t{1} << 16;
// zlib counts in uInt; feed and drain it in chunks that fit.
constexpr std::size_t kMaxZlibChunk = std::size_t{1} << 30;

[[noreturn]] void throw_input(const std::string& path, const std::string& what) { throw InputError(path + ": " + what); }

// First output size: the gzip trailer's ISIZE (exact for one member under 4 GiB), bounded by what
// deflate can produce from this many bytes (kMaxDeflateRatio), so that a forged ISIZE cannot force a
// huge allocation.
std::uint64_t initial_output_guess(const std::vector<std::uint8_t>& compressed) {
  std::uint64_t guess = kMinOutputGuess;
  if (compressed.size() >= kGzipTrailerBytes) {
    const std::uint8_t* isize = compressed.data() + compressed.size() - 4;
    guess = std::uint64_t{isize[0]} | std::uint64_t{isize[1]} << 8 | std::uint64_t{isize[2]} << 16 |
            std::uint64_t{isize[3]} << 24;
  }
  guess = std::min<std::uint64_t>(guess, compressed.size() * kMaxDeflateRatio);
  return std::max<std::uint64_t>(guess, kMinOutputGuess);
}

}  // namespace

bool has_gzip_magic(const std::vector<std::uint8_t>& bytes) {
  return bytes.size() >= 2 && bytes[0] == kGzipMagic0 && bytes[1] == kGzipMagic1;
}

void throw_no_memory(const std::string& path, const std::string& what, std::uint64_t available) {
  throw IoError(path + ": " + what + ", more than the memory available (" + std::to_string(available) + " bytes)");
}

Stream::Stream(const std::vector<std::uint8_t>& compressed, const std::string& path) : in_(compressed), path_(path) {
  if (inflateInit2(&zs_, kInflateWindowBits) != Z_OK)
    throw_input(path_, std::string("zlib inflateInit2 failed: ") + (zs_.msg ? zs_.msg : "?"));
}

Stream::~Stream() { inflateEnd(&zs_); }

std::size_t Stream::read(std::uint8_t* out, std::size_t size) {
  std::size_t done = 0;
  while (done < size && !finished_) {
    const std::size_t in_chunk = std::min(in_.size() - in_pos_, kMaxZlibChunk);
    const std::size_t out_chunk = std::min(size - done, kMaxZlibChunk);
    // zlib's API is not const-correct; inflate only reads next_in.
    zs_.next_in = const_cast<Bytef*>(in_.data() + in_pos_);
    zs_.avail_in = static_cast<uInt>(in_chunk);
    zs_.next_out = out + done;
    zs_.avail_out = static_cast<uInt>(out_chunk);
    const int status = inflate(&zs_, Z_NO_FLUSH);
    in_pos_ += in_chunk - zs_.avail_in;
    done += out_chunk - zs_.avail_out;
    produced_ += out_chunk - zs_.avail_out;

    if (status == Z_STREAM_END) {
      if (in_pos_ == in_.size()) {
        finished_ = true;
        break;
      }
      const bool another_member = in_.size() - in_pos_ >= 2 && in_[in_pos_] == kGzipMagic0 &&
                                  in_[in_pos_ + 1] == kGzipMagic1;
      if (!another_member) {
        throw_input(path_, "trailing bytes after the gzip stream: " + std::to_string(in_.size() - in_pos_) +
                               " bytes that are not a gzip member");
      }
      inflateReset(&zs_);
      continue;
    }
    if (status == Z_DATA_ERROR || status == Z_NEED_DICT) {
      throw_input(path_, std::string("corrupt gzip stream: ") + (zs_.msg ? zs_.msg : "invalid deflate data") +
                             " at compressed byte " + std::to_string(in_pos_));
    }
    if (status == Z_MEM_ERROR) throw_input(path_, "zlib ran out of memory while decompressing");
    // Output space is never zero here, so "no progress possible" means the input ran out.
    if (status == Z_BUF_ERROR && in_pos_ == in_.size()) {
      throw_input(path_, "truncated gzip stream: input ends after " + std::to_string(in_.size()) +
                             " compressed bytes (" + std::to_string(produced_) +
                             " decompressed) before the end of the stream");
    }
    if (status != Z_OK) throw_input(path_, "zlib inflate failed with status " + std::to_string(status));
  }
  return done;
}

std::vector<std::uint8_t> gunzip_bounded(const std::vector<std::uint8_t>& compressed, const std::string& path,
                                         const Bound& bound) {
  Stream stream(compressed, path);
  const std::uint64_t first = std::min(initial_output_guess(compressed), bound.max_bytes);
  if (first > bound.memory_available)
    throw_no_memory(path, "its gzip trailer declares " + std::to_string(first) + " bytes", bound.memory_available);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(first));
  std::size_t filled = 0;
  while (true) {
    filled += stream.read(out.data() + filled, out.size() - filled);
    if (filled < out.size()) break;  // the stream ended
    std::uint8_t next_byte = 0;
    if (stream.read(&next_byte, 1) == 0) break;
    if (out.size() >= bound.max_bytes)
      throw_input(path, "decompresses to more than " + bound.max_text + "; refusing a possible decompression bomb");
    // While the vector grows it holds the old buffer and the new one.
    const std::uint64_t grown = std::min<std::uint64_t>(std::uint64_t{out.size()} * 2, bound.max_bytes);
    if (grown + out.size() > bound.memory_available)
      throw_no_memory(path, "decompresses to more than " + std::to_string(out.size()) + " bytes (growing the buffer to " +
                                std::to_string(grown) + ")",
                      bound.memory_available);
    out.resize(static_cast<std::size_t>(grown));
    out[filled++] = next_byte;
  }
  out.resize(filled);
  return out;
}

}  // namespace gz
}  // namespace cnn
