// A check for every MPI call: on failure it throws naming the call, file:line, rank and host, and the
// MPI error string. The world communicator is set to MPI_ERRORS_RETURN so that errors reach this.
#pragma once

#include <mpi.h>

#include <string>

#include "cnn/errors.hpp"

namespace cnn {

inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

}  // namespace cnn

#define CNN_CHECK_MPI(call)                                                                   \
  do {                                                                                        \
    int cnn_mpi_status_ = (call);                                                             \
    if (cnn_mpi_status_ != MPI_SUCCESS)                                                       \
      ::cnn::fail_call("MPI", #call, ::cnn::mpi_error_string(cnn_mpi_status_), __FILE__, __LINE__); \
  } while (0)
