// The resolved settings of a start as TOML text: RUN_DIR/config.toml (docs/CONFIG.md).
//
// One "key = value" line per long option, the key being the option's name without "--", so that
// `cnn_mpi --config RUN_DIR/config.toml --out NEW_DIR` starts a run with the same settings. The values
// are the resolved ones (resolve_config): --device, --backend, --threads and --out as this start chose
// them. Written without toml++ (strings escaped here), so every build writes it. tests/test_settings_toml.cpp
// fails when a long option of the command line has no key here: a new option needs its line below.
#pragma once

#include <optional>
#include <string>

#include "cnn/config.hpp"

namespace cnn {

// `text` as a TOML basic string: quoted, with \" \\ \b \t \n \f \r and \u00XX for the other control
// characters. Nothing when `text` is not valid UTF-8, which TOML cannot hold.
std::optional<std::string> toml_string(const std::string& text);

// A TOML float that reads back as the same double: "0.1", "1e-08", "300.0", "inf", "nan".
std::string toml_float(double value);

// The settings as TOML: `header` (comment lines, each "# ...\n"), then `command = "train"`, then one line
// per long option in --help's order. A string that is not valid UTF-8 is written as a comment saying so.
std::string settings_toml(const TrainConfig& config, const std::string& header);

// The comment lines config.toml opens with: the run id, the start's time, ranks, fresh or resumed, the
// version and source commit of the build, and how to reuse the file.
std::string settings_toml_header(const std::string& run_id, int ranks, const std::string& resumed_from);

}  // namespace cnn
