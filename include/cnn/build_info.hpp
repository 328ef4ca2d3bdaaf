// What a binary was built from, for --version and RUN_DIR/config.toml.
#pragma once

#include <string>

namespace cnn {

// The git commit of the source tree at configure time (12 hex digits), with "+dirty" when tracked files
// differed from it; "unknown" outside git (CMakeLists.txt).
const char* source_id();

// One line: "cnn_mpi 0.1.0 (source ab9a519c0d1e, config files: toml++ 3.3.0)"; in a build without
// toml++ "config files: none, " and the reason.
std::string version_line();

}  // namespace cnn
