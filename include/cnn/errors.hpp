// Typed errors and the documented exit codes. Input problems throw a typed error; main() turns it
// into one line on stderr and the matching exit code. Library calls that can fail go through the
// CNN_CHECK_* macros, which name the call, file:line, rank and host.
#pragma once

#include <stdexcept>
#include <string>

namespace cnn {

// Documented in README.md ("Exit codes"); scripts (jobs/, tests/) depend on these values.
enum class ExitCode : int {
  kOk = 0,
  kFailure = 1,            // internal error: a bug or an unexpected library failure
  kUsage = 2,              // bad command line or bad input data
  kIo = 3,                 // a file could not be read or written
  kDiverged = 4,           // the loss or a gradient became non-finite
  kStoppedBySignal = 5,    // SIGTERM/SIGINT/SIGUSR1: checkpoint written, then stopped
  kStalled = 6,            // a rank made no progress for --stall-timeout: the watchdog aborted the job
};

// The base class carries the exit code, so one catch in main() covers every typed error.
class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// A bad option value or an inconsistent combination of options.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(ExitCode::kUsage, what) {}
};

// A data or checkpoint file whose content is malformed. The message names the file.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(ExitCode::kUsage, what) {}
};

// A file or directory that cannot be opened, read, written or synced. The message names it.
class IoError : public Error {
 public:
  explicit IoError(const std::string& what) : Error(ExitCode::kIo, what) {}
};

// Non-finite loss or gradients.
class DivergedError : public Error {
 public:
  explicit DivergedError(const std::string& what) : Error(ExitCode::kDiverged, what) {}
};

// "rank R on HOST" for messages; before MPI is up it is "rank ? on HOST".
std::string where_am_i();

// Throws Error(kFailure) naming the failed call, its file:line and this rank, with an optional hint.
[[noreturn]] void fail_call(const char* library, const char* call, const std::string& detail,
                            const char* file, int line, const char* hint = nullptr);

}  // namespace cnn

// MPI calls: on failure, the error string from MPI_Error_string. Defined in mpi_check.hpp so that
// headers that do not need MPI do not pull in mpi.h.
