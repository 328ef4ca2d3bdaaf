// The IDX reader (src/data/idx_reader.cpp) through its file entry points: raw and gzip-compressed images
// and labels. The first byte picks images or labels and the class count; the rest is the file.
#include "cnn/idx_reader.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const cnn::fuzz::MemFile file(data + 1, size - 1);
  const int classes = 1 + (data[0] >> 1) % 16;
  if (data[0] & 1) {
    cnn::fuzz::expect_clean([&] { cnn::read_idx_labels(file.path(), classes); });
  } else {
    cnn::fuzz::expect_clean([&] { cnn::read_idx_images(file.path()); });
  }
  return 0;
}
