// --trace-steps A:B (src/observe/trace.cpp, parse_trace_window).
#include <string>

#include "cnn/trace.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  cnn::fuzz::expect_clean([&] {
    const cnn::TraceWindow w = cnn::parse_trace_window(text);
    if (w.first < 0 || w.last <= w.first) std::abort();  // accepted windows must be what it promises
  });
  return 0;
}
