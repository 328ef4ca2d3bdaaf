#include "cnn/build_info.hpp"

#include "cnn/config_file.hpp"

#ifndef CNN_SOURCE_ID
#define CNN_SOURCE_ID "unknown"
#endif

namespace cnn {

const char* source_id() { return CNN_SOURCE_ID; }

std::string version_line() {
  return std::string("cnn_mpi ") + CNN_VERSION + " (source " + source_id() + ", config files: " +
         (config_file_support() ? "" : "none, ") + config_file_support_text() + ")";
}

}  // namespace cnn
