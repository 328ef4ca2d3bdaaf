// `--config FILE.toml`: settings from a TOML file, read with toml++ (docs/CONFIG.md).
//
// The file's keys are the long options without their dashes (`lr = 0.05`, `quiet = true`), plus
// `command` for the subcommand. They become command-line words placed BEFORE the real command line's,
// so that the command line overrides the file (a repeated option takes its last value) and every value
// meets the option's own checks and error messages. The valid keys are read off the CLI11 app itself,
// so a new option is a new key without an edit here.
//
// What a file may not hold stops the run with one line, exit 2: "FILE:LINE: unknown key 'k'", a
// value of the wrong TOML type, a table or an array, and toml++'s own "FILE:LINE:COLUMN: ..." for
// malformed TOML. A file that cannot be read is exit 3, like every other input file.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace cnn {

// What a key's value must be, from the option's CLI11 type name.
enum class OptionValueKind {
  kFlag,      // a flag: true or false
  kInteger,   // INT: an integer
  kUnsigned,  // UINT: an integer, or a string of digits above 2^63-1 (TOML integers stop there)
  kNumber,    // FLOAT: a float or an integer
  kText,      // anything else: a string
  kAutoOrInteger,  // AUTO|INT (--steps-per-launch): "auto" or an integer
};

struct LongOption {
  std::string name;  // without the leading "--"
  OptionValueKind kind = OptionValueKind::kText;
};

// The key that names the subcommand (`command = "eval"`); not an option.
inline constexpr const char* kCommandKey = "command";

// Whether this build reads config files (toml++ was found at configure time).
bool config_file_support();
// "toml++ 3.3.0", or why this build has no config-file support ("built with CNN_ENABLE_CONFIG_FILE=OFF").
std::string config_file_support_text();

// A config file as command-line words.
struct ConfigFileWords {
  std::string command;             // the file's subcommand ("" when it names none)
  std::vector<std::string> words;  // "--lr=0.05", "--quiet", "--resume", "" ... in the file's line order
};

// Reads `path` and turns each key into words, checking each key against `options` and `commands`
// (the subcommands' names). Throws UsageError (exit 2; one line naming the file, line and key) for
// bad content or when this build has no config-file support, IoError (exit 3) when it cannot be read.
ConfigFileWords read_config_file(const std::string& path, const std::vector<LongOption>& options,
                                 const std::vector<std::string>& commands);

// ---- the hook in the command line (src/app/config_file_cli.cpp) ------------------------------------

// Every long option of `app` and of its subcommands that a config file may set: all but --help,
// --help-all, --version and --config. In the order --help lists them.
std::vector<LongOption> long_options(const CLI::App& app);

// Adds --config FILE to `app` (after every other option), then parses argv with the file's words
// first. Without --config in argv, parses argv exactly as given. Returns the file read ("" for none).
// CLI11's exceptions (--help, a bad value) propagate as from app.parse.
std::string parse_with_config_file(CLI::App& app, int argc, char** argv);

}  // namespace cnn
