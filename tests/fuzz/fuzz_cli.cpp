// The command line (src/app/cli.cpp): parse_command_line on argv split at NUL bytes, then, for an accepted
// command line, resolve_config for a world size, local size and GPU count taken from the first bytes,
// and describe(). Every rejection must be a cnn::UsageError.
#include <string>
#include <vector>

#include "cnn/cli.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const int world = 1 + data[0] % 64;
  const int local = 1 + data[1] % world;
  const int gpus = static_cast<int>(data[2] % 4) - 1;  // -1: a build without CUDA
  std::vector<std::string> args{"cnn_mpi"};
  std::string current;
  for (std::size_t i = 3; i < size && args.size() < 40; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (!current.empty()) args.push_back(current);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  cnn::fuzz::expect_clean([&] {
    cnn::CliResult result = cnn::parse_command_line(static_cast<int>(args.size()), argv.data());
    if (result.exit_now) return;
    cnn::resolve_config(result.config, world, local, gpus);
    (void)cnn::describe(result.config);
  });
  return 0;
}
