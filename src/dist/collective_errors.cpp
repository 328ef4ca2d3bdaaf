#include "cnn/collective_errors.hpp"

#include <cstdio>

namespace cnn {

void print_error_line(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "cnn_mpi: error: %s\n", message.c_str());
  std::fflush(stderr);
}

void agree_or_stop(const MpiWorld& world, const std::function<void()>& step) {
  int code = 0;
  std::string message;
  try {
    step();
  } catch (const Error& e) {
    code = static_cast<int>(e.code());
    message = e.what();
  }
  if (world.allreduce_max(code) == 0) return;
  const int reporter = world.allreduce_min(code != 0 ? world.rank() : world.size());
  const int reported_code = reporter == world.rank() ? code : 0;
  const int exit_code = world.allreduce_max(reported_code);
  if (world.rank() == reporter) print_error_line(message);
  throw AlreadyReported(static_cast<ExitCode>(exit_code));
}

}  // namespace cnn
