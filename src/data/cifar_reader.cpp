// CIFAR-10 binary batches: every file read whole (raw or gunzipped by the IDX reader's helper, which
// stops at the format's 10000 records), its length checked against the record size before a byte is
// used, then labels checked and records split into the label and pixel arrays of one Dataset.
#include "cnn/cifar_reader.hpp"

#include <algorithm>

#include "cnn/errors.hpp"
#include "cnn/idx_reader.hpp"

namespace cnn {
namespace {

// In messages: the bound of a batch file and of its inflation.
const std::string kMaxBatchText = std::to_string(kCifarMaxBatchBytes) + " bytes, the most a CIFAR-10 batch holds (" +
                                  std::to_string(kCifarMaxRecords) + " records of " +
                                  std::to_string(kCifarRecordBytes) + " bytes)";

}  // namespace

std::vector<std::string> cifar10_train_files() {
  std::vector<std::string> names;
  for (int batch = 1; batch <= 5; ++batch) names.push_back("data_batch_" + std::to_string(batch) + ".bin");
  return names;
}

std::string cifar10_test_file() { return "test_batch.bin"; }

void parse_cifar10_records(const std::vector<std::uint8_t>& bytes, const std::string& path, Dataset& out) {
  const auto size = static_cast<std::int64_t>(bytes.size());
  if (size == 0) throw InputError(path + ": empty file");
  if (size % kCifarRecordBytes != 0) {
    throw InputError(path + ": truncated or not CIFAR-10 binary: " + std::to_string(size) +
                     " bytes is not a whole number of " + std::to_string(kCifarRecordBytes) + "-byte records (" +
                     std::to_string(size / kCifarRecordBytes) + " records and " +
                     std::to_string(size % kCifarRecordBytes) + " bytes over)");
  }
  const std::int64_t records = size / kCifarRecordBytes;
  if (records > kCifarMaxRecords)
    throw InputError(path + ": " + std::to_string(records) + " records, more than the " +
                     std::to_string(kCifarMaxRecords) + " of a CIFAR-10 batch");
  // Labels first: a bad file is refused before its pixels are copied.
  for (std::int64_t r = 0; r < records; ++r) {
    const std::uint8_t label = bytes[static_cast<std::size_t>(r * kCifarRecordBytes)];
    if (label >= kCifarClasses) {
      throw InputError(path + ": label " + std::to_string(label) + " in record " + std::to_string(r) +
                       " (byte offset " + std::to_string(r * kCifarRecordBytes) + ") is not below " +
                       std::to_string(kCifarClasses));
    }
  }
  const std::size_t old_images = out.images.size();
  out.labels.reserve(out.labels.size() + static_cast<std::size_t>(records));
  out.images.resize(old_images + static_cast<std::size_t>(records * kCifarImageBytes));
  for (std::int64_t r = 0; r < records; ++r) {
    const std::uint8_t* record = bytes.data() + r * kCifarRecordBytes;
    out.labels.push_back(record[0]);
    std::copy(record + 1, record + kCifarRecordBytes,
              out.images.begin() + static_cast<std::ptrdiff_t>(old_images + static_cast<std::size_t>(r * kCifarImageBytes)));
  }
}

void read_cifar10_batch(const std::string& path, Dataset& out, std::uint64_t memory_available) {
  parse_cifar10_records(read_file_maybe_gzip(path, kCifarMaxBatchBytes, kMaxBatchText, memory_available), path, out);
}

Dataset read_cifar10_split(const std::string& dir, const std::vector<std::string>& names, const std::string& name) {
  Dataset split;
  split.name = name;
  split.shape = {kCifarChannels, kCifarSide, kCifarSide};
  split.classes = kCifarClasses;
  for (const std::string& file : names) {
    const std::string path = find_idx_file(dir, file);  // raw first, then .gz; IoError naming both
    read_cifar10_batch(path, split);
  }
  return split;
}

DataSplits load_cifar10(const std::string& dir) {
  DataSplits splits;
  splits.train = read_cifar10_split(dir, cifar10_train_files(), "cifar10/train");
  splits.test = read_cifar10_split(dir, {cifar10_test_file()}, "cifar10/test");
  return splits;
}

}  // namespace cnn
