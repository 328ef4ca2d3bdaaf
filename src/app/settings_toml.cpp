#include "cnn/settings_toml.hpp"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <utility>
#include <vector>

#include "cnn/build_info.hpp"
#include "cnn/utc_time.hpp"

namespace cnn {
namespace {

// Whether `text` is well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool valid_utf8(const std::string& text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t length = 0;
    std::uint32_t code = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xe0) == 0xc0) {
      length = 2, code = lead & 0x1f;
    } else if ((lead & 0xf0) == 0xe0) {
      length = 3, code = lead & 0x0f;
    } else if ((lead & 0xf8) == 0xf0) {
      length = 4, code = lead & 0x07;
    } else {
      return false;
    }
    if (i + length > text.size()) return false;
    for (std::size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    constexpr std::uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kSmallest[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += length;
  }
  return true;
}

std::string toml_integer(std::int64_t value) { return std::to_string(value); }

// TOML integers are 64-bit signed: a larger seed is written as a string of digits, which --config
// takes for unsigned options (config_file.hpp).
std::string toml_unsigned(std::uint64_t value) {
  const std::string digits = std::to_string(value);
  return value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ? digits : "\"" + digits + "\"";
}

const char* command_name(Command command) {
  switch (command) {
    case Command::kTrain: return "train";
    case Command::kEval: return "eval";
    case Command::kPredict: return "predict";
    case Command::kBench: return "bench";
  }
  return "train";
}

// Each long option (without "--") and its value as TOML; nothing for a string TOML cannot hold.
// In --help's order. A new option needs its line here (tests/test_settings_toml.cpp checks).
std::vector<std::pair<const char*, std::optional<std::string>>> option_values(const TrainConfig& c) {
  const auto text = [](const std::string& value) { return toml_string(value); };
  const auto word = [](const char* value) { return toml_string(value); };
  const auto integer = [](std::int64_t value) { return std::optional<std::string>(toml_integer(value)); };
  const auto number = [](double value) { return std::optional<std::string>(toml_float(value)); };
  const auto flag = [](bool value) { return std::optional<std::string>(value ? "true" : "false"); };
  return {
      {"data", text(c.data_dir)},
      {"dataset", word(dataset_name(c.dataset))},
      {"data-mode", word(data_mode_name(c.data_mode))},
      {"stream-window-mb", integer(c.stream_window_mb)},
      {"h5-images", text(c.h5_images)},
      {"h5-labels", text(c.h5_labels)},
      {"train-samples", integer(c.train_samples)},
      {"test-samples", integer(c.test_samples)},
      {"split", text(c.split)},
      {"model", text(c.model)},
      {"filters", integer(c.filters)},
      {"batch", integer(c.batch)},
      {"epochs", integer(c.epochs)},
      {"lr", number(c.lr)},
      {"optimizer", word(optimizer_name(c.optimizer))},
      {"momentum", number(c.momentum)},
      {"beta1", number(c.beta1)},
      {"beta2", number(c.beta2)},
      {"eps", number(c.eps)},
      {"lr-schedule", text(lr_schedule_text(c.lr_schedule))},
      {"warmup-steps", integer(c.warmup_steps)},
      {"weight-decay", number(c.weight_decay)},
      {"nesterov", flag(c.nesterov)},
      {"bn-local", flag(c.bn_local)},
      {"label-smoothing", number(c.label_smoothing)},
      {"augment", text(augment_text(c.augment))},
      {"seed", std::optional<std::string>(toml_unsigned(c.seed))},
      {"device", word(device_name(c.device))},
      {"backend", word(c.backend ? backend_kind_name(*c.backend) : "")},
      {"threads", integer(c.threads)},
      {"precision", word(precision_name(c.precision))},
      {"overlap", word(overlap_name(c.overlap))},
      {"allreduce", word(allreduce_name(c.allreduce))},
      {"steps-per-launch", c.steps_per_launch > 0 ? integer(c.steps_per_launch) : word("auto")},
      {"out", text(c.out_dir)},
      {"quiet", flag(c.quiet)},
      {"trace", text(c.trace)},
      {"trace-steps", text(c.trace_steps)},
      {"checkpoint-every", integer(c.checkpoint_every)},
      {"checkpoint-every-steps", integer(c.checkpoint_every_steps)},
      {"keep", integer(c.keep)},
      {"resume", text(c.resume)},
      {"checkpoint", text(c.checkpoint)},
      {"stall-timeout", number(c.stall_timeout)},
      {"on-nonfinite", word(nonfinite_policy_name(c.on_nonfinite))},
  };
}

// A comment line ends at the first newline: a path in one must not hold one.
std::string comment_safe(std::string text) {
  for (char& ch : text)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return text;
}

}  // namespace

std::optional<std::string> toml_string(const std::string& text) {
  if (!valid_utf8(text)) return std::nullopt;
  std::string out = "\"";
  for (const char ch : text) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(ch)));
          out += escaped;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string toml_float(double value) {
  char text[64];
  const auto result = std::to_chars(text, text + sizeof(text), value);  // the shortest exact form
  std::string out(text, result.ptr);
  // "300" is a TOML integer; a float needs a fraction or an exponent ("inf" and "nan" are floats).
  if (out.find_first_of(".eni") == std::string::npos) out += ".0";
  return out;
}

std::string settings_toml(const TrainConfig& config, const std::string& header) {
  std::string out = header;
  // The values below are resolved, so the file repeats the run without the recipe; this says which came from it.
  const PresetDefaults& preset = config.preset_defaults;
  if (!preset.applied.empty()) {
    out += "# from the " + preset.preset + " preset's recipe (the options not given):";
    for (const std::string& applied : preset.applied) out += " " + applied;
    out += "\n";
  }
  out += "command = " + *toml_string(command_name(config.command)) + "\n";
  for (const auto& [key, value] : option_values(config)) {
    if (value) out += std::string(key) + " = " + *value + "\n";
    else out += "# " + std::string(key) + ": not valid UTF-8, which TOML cannot hold; give --" + key + " on the command line\n";
  }
  return out;
}

std::string settings_toml_header(const std::string& run_id, int ranks, const std::string& resumed_from) {
  return "# cnn_mpi settings of run " + comment_safe(run_id) + ", a start at " + utc_time() + " on " + std::to_string(ranks) +
         (ranks == 1 ? " rank, " : " ranks, ") +
         (resumed_from.empty() ? std::string("fresh") : "resumed from " + comment_safe(resumed_from)) + ".\n" +
         "# version: " + CNN_VERSION + "\n" +
         "# commit: " + source_id() + "\n" +
         "# Each key is a long option (docs/CONFIG.md), as this start resolved it (device, backend, threads, out):\n"
         "#   cnn_mpi --config THIS_FILE --out NEW_DIR   starts a run with the same settings.\n";
}

}  // namespace cnn
