// CIFAR-10 binary records (src/data/cifar_reader.cpp, parse_cifar10_records): label byte + 3x32x32 bytes.
#include <vector>

#include "cnn/cifar_reader.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::uint8_t> bytes(data, data + size);
  cnn::fuzz::expect_clean([&] {
    cnn::Dataset out;
    out.shape = {cnn::kCifarChannels, cnn::kCifarSide, cnn::kCifarSide};
    cnn::parse_cifar10_records(bytes, "fuzz.bin", out);
    // Accepted input: whole records only, every label a class, the pixels the bytes after each label.
    const auto records = static_cast<std::int64_t>(size) / cnn::kCifarRecordBytes;
    if (records * cnn::kCifarRecordBytes != static_cast<std::int64_t>(size) || out.count() != records) std::abort();
    for (std::int64_t r = 0; r < records; ++r) {
      if (out.labels[r] >= cnn::kCifarClasses || out.labels[r] != data[r * cnn::kCifarRecordBytes]) std::abort();
      if (out.images[r * cnn::kCifarImageBytes] != data[r * cnn::kCifarRecordBytes + 1]) std::abort();
    }
  });
  return 0;
}
