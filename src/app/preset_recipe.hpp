// The one place where a --model preset's training recipe (presets.hpp) becomes settings: each default
// goes to the option it names, through that option's own parser and checks, exactly as if the user had
// typed it, unless the user gave the option. "Given" counts the command line and a --config file
// alike (the file's keys are parsed as options, config_file.hpp), so the precedence is
//   the option's built-in default < the preset's recipe < the --config file < the command line.
// Private to src/app.
#pragma once

#include <string>

#include "cnn/config.hpp"

namespace CLI {
class App;
}

namespace cnn {

// After `app` has parsed the command line (and any --config file) into `config`: for a `train` run
// whose --model is a preset with a recipe, sets the options the user gave no value, and records what
// it did in config.preset_defaults. Nothing for eval and predict (they take the model from the
// checkpoint) or for a model without a recipe. Throws UsageError if a default is refused (a recipe
// that does not parse is a bug that tests/test_preset_recipe.cpp catches).
void apply_preset_recipe(CLI::App& app, TrainConfig& config);

// The settings block's line of what the preset's recipe did, "" when none applied:
//   "  preset_defaults: resnet10: --batch 512, --epochs 16, ...; given instead: --lr\n"
std::string describe_preset_defaults(const PresetDefaults& defaults);

// `message` (a refusal of the settings), with a hint appended when it names an option whose value came
// from the preset: "(--lr-schedule onecycle is the resnet10 preset's default; give --lr-schedule to
// choose another)". Unchanged otherwise.
std::string with_preset_hint(const std::string& message, const PresetDefaults& defaults);

}  // namespace cnn
