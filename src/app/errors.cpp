#include "cnn/errors.hpp"

#include <mpi.h>
#include <unistd.h>

#include <sstream>

namespace cnn {

std::string where_am_i() {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  std::string rank = "?";
  if (initialized && !finalized) {
    int r = 0;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &r) == MPI_SUCCESS) rank = std::to_string(r);
  }
  return "rank " + rank + " on " + host;
}

void fail_call(const char* library, const char* call, const std::string& detail, const char* file, int line,
               const char* hint) {
  std::ostringstream message;
  message << library << " call failed on " << where_am_i() << ": " << call << " at " << file << ":" << line
          << ": " << detail;
  if (hint != nullptr) message << " HINT: " << hint;
  throw Error(ExitCode::kFailure, message.str());
}

}  // namespace cnn
