#include "cnn/test_hooks.hpp"

#include <algorithm>
#include <cstdlib>

namespace cnn {
namespace {

// A positive integer; 0 when unset or malformed.
std::int64_t positive_env(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  return (end != text && *end == '\0' && value > 0) ? value : 0;
}

std::optional<TestHooks::NanAt> nan_at_from_environment() {
  const char* text = std::getenv("CNN_TEST_NAN_AT");
  if (text == nullptr) return std::nullopt;
  char* end = nullptr;
  const long rank = std::strtol(text, &end, 10);
  if (end == text || *end != ':') return std::nullopt;
  const long long step = std::strtoll(end + 1, nullptr, 10);
  if (step <= 0) return std::nullopt;
  return TestHooks::NanAt{rank, step};
}

std::optional<TestHooks::StallAt> stall_from_environment(const char* variable) {
  const char* text = std::getenv(variable);
  if (text == nullptr) return std::nullopt;
  const std::string value = text;
  const std::size_t first = value.find(':');
  const std::size_t second = first == std::string::npos ? first : value.find(':', first + 1);
  if (second == std::string::npos) return std::nullopt;
  TestHooks::StallAt stall;
  stall.rank = std::atoi(value.substr(0, first).c_str());
  stall.step = std::atoll(value.substr(first + 1, second - first - 1).c_str());
  stall.phase = value.substr(second + 1);
  return stall;
}

}  // namespace

TestHooks read_test_hooks_from_environment() {
  TestHooks hooks;
  if (const char* pause = std::getenv("CNN_TEST_WRITE_PAUSE_MS"))
    hooks.write_pause_ms = std::max(0L, std::strtol(pause, nullptr, 10));
  if (const char* kill = std::getenv("CNN_TEST_KILL_DURING_WRITE")) {
    char* end = nullptr;
    const long n = std::strtol(kill, &end, 10);
    if (end != kill && *end == '\0' && n > 0) hooks.kill_at_checkpoint_write = n;
  }
  hooks.nan_at = nan_at_from_environment();
  hooks.stop_rank = positive_env("CNN_TEST_STOP_RANK");
  hooks.stop_after_steps = positive_env("CNN_TEST_STOP_AFTER_STEPS");
  hooks.step_delay_ms = positive_env("CNN_TEST_STEP_DELAY_MS");
  hooks.stall = stall_from_environment("CNN_TEST_STALL");
  if (!hooks.stall) {
    hooks.stall = stall_from_environment("CNN_TEST_SIGSTOP");
    if (hooks.stall) hooks.stall->sigstop = true;
  }
  hooks.stop_at_checkpoint_write = positive_env("CNN_TEST_STOP_DURING_WRITE");
  hooks.predict_block = positive_env("CNN_TEST_PREDICT_BLOCK");
  return hooks;
}

void install_write_test_hooks(const TestHooks& hooks) {
  fsutil::set_test_write_pause_ms(hooks.write_pause_ms);
  set_test_kill_at_checkpoint_write(hooks.kill_at_checkpoint_write);
  set_test_stop_at_checkpoint_write(hooks.stop_at_checkpoint_write);
}

}  // namespace cnn
