// The run directory's CSV logs as a resume reads them (src/io/run_log.cpp, RunLog::prepare_resume keeps
// the rows up to the checkpoint's epoch): the input is split at the first two 0xFF bytes into
// metrics.csv, timing.csv and allreduce.csv; the first byte is the completed epoch count.
#include <fstream>
#include <string>

#include "cnn/run_log.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const cnn::fuzz::TempDir dir;
  const char* names[] = {"metrics.csv", "timing.csv", "allreduce.csv"};
  std::size_t begin = 1;
  for (int f = 0; f < 3 && begin <= size; ++f) {
    std::size_t end = begin;
    while (end < size && data[end] != 0xFF) ++end;
    std::ofstream(dir.path() + "/" + names[f], std::ios::binary)
        .write(reinterpret_cast<const char*>(data + begin), static_cast<std::streamsize>(end - begin));
    begin = end + 1;
  }
  cnn::fuzz::expect_clean([&] { cnn::RunLog(dir.path()).prepare_resume(static_cast<std::int64_t>(data[0]) - 8); });
  return 0;
}
