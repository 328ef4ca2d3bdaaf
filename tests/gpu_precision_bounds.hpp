// What the GPU tests of --precision tf32 and bf16 share (gpu_precision, gpu_precision_steps): the
// precisions with tensor cores, the bounds on each parameter tensor's relative difference
// ||got - want|| / ||want||, and that difference (docs/PRECISION.md).
#pragma once

#include <cstddef>
#include <vector>

#include "cnn/choices.hpp"
#include "test_util.hpp"

namespace cnn::precision_test {

constexpr cnn::Precision kTensorCorePrecisions[] = {cnn::Precision::kTf32, cnn::Precision::kBf16};

// The bounds, on the relative difference ||got - want|| / ||want|| of each parameter tensor.
inline double bound(cnn::Precision precision) { return precision == cnn::Precision::kTf32 ? 5e-3 : 3e-2; }

inline double relative_difference(const float* got, const float* want, std::size_t n) {
  return cnn::test::relative_error(std::vector<float>(got, got + n), std::vector<float>(want, want + n));
}

}  // namespace cnn::precision_test
