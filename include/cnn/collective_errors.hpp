// Agreement on errors between ranks. A step that can fail on some ranks only (reading a file,
// creating the run directory, opening a device) runs inside agree_or_stop(): if any rank failed, the
// lowest failing rank prints its one-line message and every rank throws AlreadyReported with that
// rank's exit code, so the job ends together instead of hanging in the next collective.
#pragma once

#include <functional>

#include "cnn/communicator.hpp"
#include "cnn/errors.hpp"

namespace cnn {

// An error whose message has been printed already; main() only exits with its code.
class AlreadyReported : public Error {
 public:
  explicit AlreadyReported(ExitCode code) : Error(code, "(reported)") {}
};

void agree_or_stop(const MpiWorld& world, const std::function<void()>& step);

// The one line every error is printed as.
void print_error_line(const std::string& message);

}  // namespace cnn
