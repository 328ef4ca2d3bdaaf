// The current UTC time as text, for logs, lock files and default run directory names.
#pragma once

#include <ctime>
#include <string>

namespace cnn {

inline constexpr const char* kIsoUtc = "%Y-%m-%dT%H:%M:%SZ";  // 2026-11-26T00:28:25Z

// strftime of the current UTC time; "" should the clock or the format fail.
inline std::string utc_time(const char* format = kIsoUtc) {
  char text[64] = {0};
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (now == static_cast<std::time_t>(-1) || gmtime_r(&now, &utc) == nullptr) return "";
  return std::strftime(text, sizeof(text), format, &utc) == 0 ? std::string() : std::string(text);
}

}  // namespace cnn
