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

// Reads the whole file, decompressing when it starts with the gzip magic (1f 8b) - whatever its name.
// Throws IoError for a missing or unreadable file or a directory, InputError for bad content;
// every message starts with the path.
std::vector<std::uint8_t> read_file_maybe_gzip(const std::string& path);

IdxImages read_idx_images(const std::string& path);
// Every label must be < num_classes.
std::vector<std::uint8_t> read_idx_labels(const std::string& path, int num_classes);

// Parses IDX bytes already in memory (`path` only names them in messages). Used by the readers
// above and by the fuzz targets.
IdxImages parse_idx_images(const std::vector<std::uint8_t>& bytes, const std::string& path);
std::vector<std::uint8_t> parse_idx_labels(const std::vector<std::uint8_t>& bytes, const std::string& path,
                                           int num_classes);

// Finds `dir/name` or `dir/name.gz` (raw first). Throws IoError naming both if neither exists.
std::string find_idx_file(const std::string& dir, const std::string& name);

}  // namespace cnn
