// The CIFAR-10 binary format (https://www.cs.toronto.edu/~kriz/cifar.html, "binary version").
//
// A batch file is a sequence of 3073-byte records: one label byte (0..9), then 3072 pixel bytes, the
// 32x32 red plane, then green, then blue, each row-major. That is [C, H, W] with C = 3, the layout of
// Dataset, so records are copied as they are. The training split is data_batch_1.bin ..
// data_batch_5.bin in that order, the test split test_batch.bin; each may also be gzip-compressed
// (NAME.gz, found when NAME is absent). The real files hold 10000 records each; any whole number from
// 1 to 10000 is accepted, so that tests can use small synthetic files. The format has no header, so
// 10000 records (30730000 bytes) bound a file and, for .gz, its inflation: it stops one byte past.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cnn/dataset.hpp"
#include "cnn/idx_reader.hpp"

namespace cnn {

inline constexpr int kCifarChannels = 3;
inline constexpr int kCifarSide = 32;
inline constexpr int kCifarClasses = 10;
inline constexpr std::int64_t kCifarImageBytes = std::int64_t{kCifarChannels} * kCifarSide * kCifarSide;  // 3072
inline constexpr std::int64_t kCifarRecordBytes = 1 + kCifarImageBytes;                                 // 3073
inline constexpr std::int64_t kCifarMaxRecords = 10000;                                                // per batch file
inline constexpr std::int64_t kCifarMaxBatchBytes = kCifarMaxRecords * kCifarRecordBytes;             // 30730000

// The file names of the splits, without the optional .gz.
std::vector<std::string> cifar10_train_files();  // data_batch_1.bin .. data_batch_5.bin
std::string cifar10_test_file();                 // test_batch.bin

// Appends the records held in `bytes` to `out` (labels and images). `path` only names them in
// messages. Throws InputError "PATH: ..." for an empty buffer, a length that is not a whole number of
// records (a truncated file), more than kCifarMaxRecords records, or a label >= 10 (naming the record).
void parse_cifar10_records(const std::vector<std::uint8_t>& bytes, const std::string& path, Dataset& out);

// Reads one batch file (raw or gzip) and appends its records to `out`. Refused before its bulk is read
// or inflated: a non-regular file (IoError, never blocks), a file or stream over kCifarMaxBatchBytes
// (InputError), one that needs more than `memory_available` bytes (IoError).
void read_cifar10_batch(const std::string& path, Dataset& out,
                        std::uint64_t memory_available = memory_available_bytes());

// Reads the given batch files (raw or gzip, found as in find_idx_file) in order into one split.
// Throws IoError for a missing or unreadable file, InputError for bad content; messages name the file.
Dataset read_cifar10_split(const std::string& dir, const std::vector<std::string>& names, const std::string& name);

// Both splits of the CIFAR-10 binary distribution in `dir` (the cifar-10-batches-bin folder).
DataSplits load_cifar10(const std::string& dir);

}  // namespace cnn
