#include "app/preset_recipe.hpp"

#include <CLI/CLI.hpp>
#include <cctype>
#include <stdexcept>

#include "cnn/errors.hpp"
#include "cnn/presets.hpp"

namespace cnn {
namespace {

CLI::Option& option_of(CLI::App& app, const std::string& name) {
  CLI::Option* option = app.get_option_no_throw("--" + name);
  if (option == nullptr) throw std::logic_error("preset recipe names no option --" + name);
  return *option;
}

// The recipe's own value for `name`, or "" when the recipe does not set it.
std::string recipe_value(const Preset& preset, const std::string& name) {
  for (const RecipeDefault& entry : preset.recipe)
    if (entry.option == name) return entry.value;
  return "";
}

// What the settings block shows for one default: "--batch 512", and a flag's true as the bare flag.
std::string shown(const RecipeDefault& entry) {
  return "--" + entry.option + (entry.value == "true" ? "" : " " + entry.value);
}

// Whether `message` names `option` ("--lr" in "... --lr must ..."), not a longer one ("--lr-schedule").
bool names_option(const std::string& message, const std::string& option) {
  for (std::size_t at = message.find(option); at != std::string::npos; at = message.find(option, at + 1)) {
    const std::size_t end = at + option.size();
    const bool word_ends = end == message.size() || !(std::isalnum(static_cast<unsigned char>(message[end])) ||
                                                       message[end] == '-' || message[end] == '_');
    if (word_ends) return true;
  }
  return false;
}

}  // namespace

void apply_preset_recipe(CLI::App& app, TrainConfig& config) {
  config.preset_defaults = PresetDefaults{};
  const Preset* preset = find_preset(config.model);
  if (preset == nullptr || preset->recipe.empty() || config.command != Command::kTrain) return;
  PresetDefaults& record = config.preset_defaults;
  record.preset = preset->name;
  for (const RecipeDefault& entry : preset->recipe) {
    CLI::Option& option = option_of(app, entry.option);
    if (option.count() > 0) {  // given on the command line or in the --config file: it wins
      record.given.push_back("--" + entry.option);
      continue;
    }
    if (!entry.only_with.empty()) {
      // The companion comes earlier in the recipe, so its value is final here: the user's or the recipe's.
      const CLI::Option& companion = option_of(app, entry.only_with);
      const std::string wanted = recipe_value(*preset, entry.only_with);
      if (companion.results().empty() || companion.results().back() != wanted) {
        record.skipped.push_back(shown(entry) + " (needs --" + entry.only_with + " " + wanted + ")");
        continue;
      }
    }
    try {
      option.add_result(entry.value);
      option.run_callback();  // the option's own parser and checks, as for a value typed by the user
    } catch (const CLI::ParseError& e) {
      throw UsageError("the " + preset->name + " preset's default " + shown(entry) + ": " + e.what());
    }
    record.applied.push_back(shown(entry));
  }
}

std::string describe_preset_defaults(const PresetDefaults& defaults) {
  if (defaults.preset.empty()) return "";
  const auto list = [](const std::vector<std::string>& items) {
    std::string text;
    for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
    return text;
  };
  std::string text = "  preset_defaults: " + defaults.preset + ": " +
                     (defaults.applied.empty() ? std::string("none") : list(defaults.applied));
  if (!defaults.given.empty()) text += "; given instead: " + list(defaults.given);
  if (!defaults.skipped.empty()) text += "; not applied: " + list(defaults.skipped);
  return text + "\n";
}

std::string with_preset_hint(const std::string& message, const PresetDefaults& defaults) {
  for (const std::string& applied : defaults.applied) {
    const std::string option = applied.substr(0, applied.find(' '));
    if (!names_option(message, option)) continue;
    const bool flag = option == applied;
    return message + " (" + applied + " is the " + defaults.preset + " preset's default; give " +
           (flag ? option + "=false to turn it off" : option + " to choose another") + ")";
  }
  return message;
}

}  // namespace cnn
