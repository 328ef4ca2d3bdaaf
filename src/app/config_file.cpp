// Reading a --config FILE.toml into command-line words (config_file.hpp). The only file that includes
// toml++, header-only, so that nothing else pays its compile time and the binary needs no toml++ library.
#include "cnn/config_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <tuple>

#include "cnn/errors.hpp"

#if CNN_HAVE_TOMLPLUSPLUS
#if __has_include(<toml++/toml.hpp>)
#include <toml++/toml.hpp>  // upstream's name
#else
#include <toml++/toml.h>  // Debian 12's libtomlplusplus-dev 3.3
#endif
#include "io/fsync_util.hpp"
#include "io/regular_file.hpp"
#endif

namespace cnn {

#if !CNN_HAVE_TOMLPLUSPLUS

bool config_file_support() { return false; }

std::string config_file_support_text() { return CNN_CONFIG_FILE_ABSENT_REASON; }

ConfigFileWords read_config_file(const std::string& path, const std::vector<LongOption>&,
                                 const std::vector<std::string>&) {
  throw UsageError("--config " + path + ": this build has no config-file support (" CNN_CONFIG_FILE_ABSENT_REASON
                   "); give the settings as options");
}

#else

namespace {

// A settings file is a few dozen lines; anything much larger is the wrong file, not read into memory.
constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;

// The whole file. Opened like every input file: never blocks on a FIFO, refuses what is not a file.
std::string read_text(const std::string& path) {
  const fsutil::ReadFd fd = fsutil::open_regular_file(path);
  std::string text;
  char buffer[1 << 14];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw IoError(path + ": read failed: " + fsutil::errno_text(errno));
    if (got == 0) return text;
    text.append(buffer, static_cast<std::size_t>(got));
    if (text.size() > kMaxConfigBytes)
      throw UsageError(path + ": larger than 1 MiB; a config file holds a few lines of settings");
  }
}

// Keys may be quoted TOML strings: control characters would break the one-line message.
std::string printable(std::string_view text) {
  std::string out;
  for (const char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    if (byte < 0x20 || byte == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", byte);
      out += escaped;
    } else {
      out += ch;
    }
  }
  return out;
}

const char* type_phrase(toml::node_type type) {
  switch (type) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    case toml::node_type::none: break;
  }
  return "nothing";
}

const char* expected_phrase(OptionValueKind kind) {
  switch (kind) {
    case OptionValueKind::kFlag: return "true or false";
    case OptionValueKind::kInteger: return "an integer";
    case OptionValueKind::kUnsigned: return "a non-negative integer (above 2^63-1: a string of digits)";
    case OptionValueKind::kNumber: return "a number";
    case OptionValueKind::kText: return "a string";
    case OptionValueKind::kAutoOrInteger: return "\"auto\" or an integer";
  }
  return "?";
}

// The shortest text that reads back as the same double: 0.1 stays "0.1", not 0.1000000000000000055.
std::string number_text(double value) {
  char text[64];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The option's value as CLI11 reads it after "--name=", or nothing when the TOML type is wrong.
bool value_text(const toml::node& node, OptionValueKind kind, std::string& text) {
  switch (kind) {
    case OptionValueKind::kFlag:
      if (const auto* flag = node.as_boolean()) text = flag->get() ? "true" : "false";
      return node.is_boolean();
    case OptionValueKind::kInteger:
      if (const auto* integer = node.as_integer()) text = std::to_string(integer->get());
      return node.is_integer();
    case OptionValueKind::kUnsigned:
      if (const auto* integer = node.as_integer()) text = std::to_string(integer->get());
      if (const auto* digits = node.as_string()) text = digits->get();
      return node.is_integer() || (node.is_string() && all_digits(text));
    case OptionValueKind::kNumber:
      if (const auto* integer = node.as_integer()) text = std::to_string(integer->get());
      if (const auto* number = node.as_floating_point()) text = number_text(number->get());
      return node.is_number();
    case OptionValueKind::kText:
      if (const auto* string = node.as_string()) text = string->get();
      return node.is_string();
    case OptionValueKind::kAutoOrInteger:  // the option's own check refuses other strings, as on the command line
      if (const auto* integer = node.as_integer()) text = std::to_string(integer->get());
      if (const auto* string = node.as_string()) text = string->get();
      return node.is_integer() || node.is_string();
  }
  return false;
}

// How CLI11 is given one value. "--name=value" keeps a value that starts with '-' a value; an empty
// string is its own word, since CLI11 reads "--name=" as a missing value.
void append_words(const LongOption& option, const std::string& text, std::vector<std::string>& words) {
  if (option.kind == OptionValueKind::kFlag) {
    words.push_back(text == "true" ? "--" + option.name : "--" + option.name + "=false");
  } else if (text.empty()) {
    words.push_back("--" + option.name);
    words.emplace_back();
  } else {
    words.push_back("--" + option.name + "=" + text);
  }
}

struct Entry {
  std::uint32_t line;
  std::uint32_t column;
  std::string key;
  const toml::node* node;
};

}  // namespace

bool config_file_support() { return true; }

std::string config_file_support_text() {
  return "toml++ " + std::to_string(TOML_LIB_MAJOR) + "." + std::to_string(TOML_LIB_MINOR) + "." +
         std::to_string(TOML_LIB_PATCH);
}

ConfigFileWords read_config_file(const std::string& path, const std::vector<LongOption>& options,
                                 const std::vector<std::string>& commands) {
  std::string text;
  try {
    text = read_text(path);
  } catch (const IoError& e) {
    throw IoError(std::string("--config ") + e.what());
  }
  toml::table table;
  try {
    table = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::string what = printable(e.description());
    throw UsageError(path + ":" + std::to_string(e.source().begin.line) + ":" + std::to_string(e.source().begin.column) +
                     ": malformed TOML: " + what);
  }
  // toml++ keeps keys sorted; the first bad key reported is the first in the file.
  std::vector<Entry> entries;
  for (const auto& [key, node] : table) {
    const toml::source_region& where = key.source().begin.line != 0 ? key.source() : node.source();
    entries.push_back({where.begin.line, where.begin.column, std::string(key.str()), &node});
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.line, a.column) < std::tie(b.line, b.column); });

  ConfigFileWords result;
  for (const Entry& entry : entries) {
    const std::string at = path + ":" + std::to_string(entry.line) + ": ";
    const std::string key = printable(entry.key);
    const toml::node& node = *entry.node;
    if (node.is_table())
      throw UsageError(at + "'" + key + "' is a table; a config file holds top-level keys only (lr = 0.05, " +
                       "not [" + key + "] or " + key + ".name = ...)");
    if (node.is_array()) throw UsageError(at + "key '" + key + "' holds an array; each key takes one value");
    if (entry.key == kCommandKey) {
      const auto* name = node.as_string();
      std::string available;
      for (const std::string& command : commands) {
        if (name != nullptr && name->get() == command) result.command = command;
        available += (available.empty() ? "" : ", ") + command;
      }
      if (result.command.empty())
        throw UsageError(at + "key 'command' must be one of the subcommands (" + available + "), got " +
                         (name != nullptr ? "'" + printable(name->get()) + "'" : std::string(type_phrase(node.type()))));
      continue;
    }
    if (entry.key == "config") throw UsageError(at + "key 'config': a config file cannot read another one");
    const auto option = std::find_if(options.begin(), options.end(),
                                     [&](const LongOption& o) { return o.name == entry.key; });
    if (option == options.end()) {
      std::string hint;
      std::string dashed = entry.key;
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      if (std::any_of(options.begin(), options.end(), [&](const LongOption& o) { return o.name == dashed; }))
        hint = " (did you mean '" + dashed + "'? keys are the long options, with their dashes)";
      else
        hint = " (the keys are the long options without '--')";
      throw UsageError(at + "unknown key '" + key + "'" + hint);
    }
    std::string value;
    if (!value_text(node, option->kind, value))
      throw UsageError(at + "key '" + key + "' must be " + expected_phrase(option->kind) + ", got " +
                       type_phrase(node.type()));
    append_words(*option, value, result.words);
  }
  return result;
}

#endif

}  // namespace cnn
