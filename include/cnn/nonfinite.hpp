// The divergence check's scan: where the first NaN or infinity in a float buffer is. The CPU twin is
// here; the CUDA twin (kernels/ops/nonfinite.cu, cnn::cuda::first_nonfinite) has the same name and
// argument order plus the stream, and reads back one integer.
#pragma once

#include <cstdint>

namespace cnn {

// Index of the first non-finite value in data[0, count), or -1 when all are finite.
std::int64_t first_nonfinite(const float* data, std::int64_t count);

}  // namespace cnn
