// What the GPU tests of the staged handovers share (gpu_staged_handover.cpp,
// gpu_staged_backward_handover.cpp, one test program each): the GPU they need, how many staged words a
// tensor holds, and the head of a longer buffer.
#pragma once

#include <cstdint>
#include <vector>

#include "boost_test.hpp"
#include "cnn/choices.hpp"
#include "gpu_test_util.hpp"

namespace cnn::staged_test {

// tf32 and bf16 need compute capability 8.0 (a global fixture: the program's one).
struct RequireTensorCoreGpu {
  RequireTensorCoreGpu() { cnn::gpu_test::require_gpu(8); }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireTensorCoreGpu);

// The first `words` words (a staged buffer may be longer than the tensor: sized for the largest batch).
inline std::vector<std::uint32_t> head_of_vector(std::vector<std::uint32_t> all, std::int64_t words) {
  BOOST_REQUIRE(static_cast<std::int64_t>(all.size()) >= words);
  all.resize(static_cast<std::size_t>(words));
  return all;
}

// The words of `pixels` pixels of channels_padded channels in the precision's staged format.
inline std::int64_t words_of(std::int64_t pixels, int channels_padded, Precision precision) {
  return pixels * channels_padded / (precision == Precision::kBf16 ? 2 : 1);
}

}  // namespace cnn::staged_test
