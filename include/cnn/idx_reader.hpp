// The IDX format of MNIST and Fashion-MNIST, raw or gzip-compressed.
//
// Layout: magic (2 zero bytes, type code 0x08 = uint8, number of dimensions), then one big-endian
// uint32 per dimension, then the data. Images are 3-D (count, rows, cols), labels 1-D (count).
// Everything is validated before use: magic, type, dimension count, non-zero and non-overflowing
// sizes, exact file length, and (for labels) the class range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnn {

struct IdxImages {
  std::int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<std::uint8_t> pixels;  // [count, rows, cols]
};

// The memory this process may still allocate, in bytes: MemAvailable from /proc/meminfo, lowered to
// the room left under a cgroup memory limit (v2 memory.max - memory.current, v1 limit_in_bytes -
// usage_in_bytes) of this process's cgroup or an ancestor. UINT64_MAX when none can be read. Under
// overcommit a larger allocation does not fail: the OOM killer ends the rank later. So the readers
// refuse a file (or a declared decompressed size) above it before allocating, with IoError (exit 3):
// "PATH: ..., more than the memory available (N bytes)".
std::uint64_t memory_available_bytes();

// Reads the whole file, decompressing when it starts with the gzip magic (1f 8b) - whatever its name.
// Only regular files are opened (O_NONBLOCK, then fstat: a FIFO, socket or device is refused with
// IoError and never blocks). The file, or its decompressed stream, may hold at most `max_bytes`
// (`max_text` names the limit in the message: "file is N bytes, more than MAX_TEXT", "decompresses to
// more than MAX_TEXT; refusing a possible decompression bomb"); the inflation stops one byte past it,
// and its buffer never outgrows `memory_available`. Throws IoError for a missing or unreadable file,
// a directory or a non-regular file, InputError for bad content; every message starts with the path.
std::vector<std::uint8_t> read_file_maybe_gzip(const std::string& path, std::uint64_t max_bytes,
                                               const std::string& max_text, std::uint64_t memory_available);
// The same with the IDX reader's limit (4 GiB) and memory_available_bytes().
std::vector<std::uint8_t> read_file_maybe_gzip(const std::string& path);

// IDX files, raw or gzip. A gzip file's header is inflated first: the size it declares is checked
// against the limit (4 GiB) and `memory_available` before a buffer of exactly that size is
// allocated, and a stream that holds more is refused after one more byte ("trailing bytes: the header
// declares N bytes of data, ..."), one that holds less as "truncated: expected N bytes of data, found M".
IdxImages read_idx_images(const std::string& path, std::uint64_t memory_available = memory_available_bytes());
// Every label must be < num_classes.
std::vector<std::uint8_t> read_idx_labels(const std::string& path, int num_classes,
                                          std::uint64_t memory_available = memory_available_bytes());

// Parses IDX bytes already in memory (`path` only names them in messages). Used by the readers
// above and by the fuzz targets.
IdxImages parse_idx_images(const std::vector<std::uint8_t>& bytes, const std::string& path);
std::vector<std::uint8_t> parse_idx_labels(const std::vector<std::uint8_t>& bytes, const std::string& path,
                                           int num_classes);

// Finds `dir/name` or `dir/name.gz` (raw first). Throws IoError naming both if neither exists.
std::string find_idx_file(const std::string& dir, const std::string& name);

}  // namespace cnn
