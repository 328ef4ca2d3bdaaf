// RUN_DIR/config.toml: the settings each start of a run used (settings_toml.hpp, docs/CONFIG.md).
//
// Rank 0 writes it right after claiming the run directory, under the run's lock. It never replaces a
// file: the first start of a run writes config.toml; a start that finds one there (a resume) writes
// config.resume-N.toml beside it, N = 1, 2, ... the first name free, so each start's settings stay.
#pragma once

#include <string>

namespace cnn {

// The file the first start writes; RunDirectory counts it as a trace of an earlier run.
inline constexpr const char* kRunSettingsName = "config.toml";

// Writes `text` into `run_dir` durably (a temporary, fsync, rename, fsync of the directory) under the
// first free name, and returns its path. Throws IoError naming the file.
std::string write_run_settings(const std::string& run_dir, const std::string& text);

}  // namespace cnn
