// The hook of --config FILE.toml in the command line (config_file.hpp): the valid keys read off the
// CLI11 app, and the file's words put before argv's so that the command line overrides the file.
#include <CLI/CLI.hpp>
#include <algorithm>

#include "cnn/config_file.hpp"
#include "cnn/errors.hpp"

namespace cnn {
namespace {

constexpr const char* kConfigName = "config";

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// CLI11's type name, with any validator's description after a colon ("INT", "UINT", "FLOAT:POSITIVE").
OptionValueKind kind_of(const CLI::Option& option) {
  if (option.get_expected_max() == 0) return OptionValueKind::kFlag;  // takes no value
  const std::string type = option.get_type_name();
  if (starts_with(type, "AUTO|INT")) return OptionValueKind::kAutoOrInteger;
  if (starts_with(type, "UINT")) return OptionValueKind::kUnsigned;
  if (starts_with(type, "INT")) return OptionValueKind::kInteger;
  if (starts_with(type, "FLOAT") || starts_with(type, "NUMBER")) return OptionValueKind::kNumber;
  return OptionValueKind::kText;
}

// Options that are actions, not settings.
bool is_setting(const std::string& name) {
  return name != "help" && name != "help-all" && name != "version" && name != kConfigName;
}

std::vector<const CLI::App*> app_and_subcommands(const CLI::App& app) {
  std::vector<const CLI::App*> apps{&app};
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) apps.push_back(sub);
  return apps;
}

// The option `word` names ("--name", "--name=value", "-h"), in the app or one of its subcommands.
const CLI::Option* option_named(const CLI::App& app, const std::string& word) {
  const std::string name = word.substr(0, word.find('='));
  for (const CLI::App* each : app_and_subcommands(app))
    if (const CLI::Option* option = each->get_option_no_throw(name)) return option;
  return nullptr;
}

// Where argv names its subcommand and the config file, read the way CLI11 reads argv: an option that
// takes a value consumes the next word unless it has "=value"; "--" ends the options.
struct ArgvShape {
  int subcommand = -1;  // argv index of the subcommand's word; -1: none
  bool has_config = false;
  std::string config;   // the last --config's value (a repeated option takes its last value)
};

ArgvShape scan(const CLI::App& app, int argc, char** argv) {
  ArgvShape shape;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    if (word.size() > 1 && word[0] == '-') {
      const CLI::Option* option = option_named(app, word);
      const bool inline_value = word.find('=') != std::string::npos;
      std::string value = inline_value ? word.substr(word.find('=') + 1) : std::string();
      if (option != nullptr && option->get_expected_max() != 0 && !inline_value && i + 1 < argc) value = argv[++i];
      if (starts_with(word, "--config") && (word.size() == 8 || word[8] == '=')) {
        shape.has_config = true;
        shape.config = value;
      }
      continue;
    }
    if (shape.subcommand < 0)
      for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        if (sub->check_name(word)) shape.subcommand = i;
  }
  return shape;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}

}  // namespace

std::vector<LongOption> long_options(const CLI::App& app) {
  std::vector<LongOption> options;
  for (const CLI::App* each : app_and_subcommands(app))
    for (const CLI::Option* option : each->get_options())
      for (const std::string& name : option->get_lnames()) {
        const bool known = std::any_of(options.begin(), options.end(), [&](const LongOption& o) { return o.name == name; });
        if (is_setting(name) && !known) options.push_back({name, kind_of(*option)});
      }
  return options;
}

std::string parse_with_config_file(CLI::App& app, int argc, char** argv) {
  std::string help =
      "read settings from a TOML file: the keys are the long options without '--' (lr = 0.05, quiet = true, "
      "model = \"cifar\") and command = \"train\" | \"eval\" | \"predict\"; the command line overrides the file (docs/CONFIG.md)";
  if (!config_file_support()) help += ". This build reads none: " + config_file_support_text();
  app.add_option_function<std::string>("--" + std::string(kConfigName), [](const std::string&) {}, help)  // read below
      ->type_name("FILE")
      ->group("Config file");

  const ArgvShape shape = scan(app, argc, argv);
  if (!shape.has_config) {
    app.parse(argc, argv);
    return "";
  }
  if (shape.config.empty()) throw UsageError("--config needs the path of a TOML file");
  const ConfigFileWords file = read_config_file(shape.config, long_options(app), subcommand_names(app));

  // The subcommand first, so that options of its own parse after it (the main app's parse there too:
  // the app falls through); then the file's words; then argv's, last, so that they win: a repeated
  // option takes its last value. argv's own subcommand beats the file's.
  std::vector<std::string> words;
  if (shape.subcommand > 0) words.emplace_back(argv[shape.subcommand]);
  else if (!file.command.empty()) words.push_back(file.command);
  words.insert(words.end(), file.words.begin(), file.words.end());
  for (int i = 1; i < argc; ++i)
    if (i != shape.subcommand) words.emplace_back(argv[i]);
  std::reverse(words.begin(), words.end());  // CLI11 takes a vector of words last first
  app.parse(words);
  return shape.config;
}

}  // namespace cnn
