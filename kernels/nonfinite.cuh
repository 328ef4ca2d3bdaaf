// The CUDA twin of cnn::first_nonfinite (include/cnn/nonfinite.hpp); see kernels/nonfinite.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cnn::cuda {

// Index of the first non-finite value in the device buffer data[0, count), or -1. Synchronises
// `stream` (the answer is read back).
std::int64_t first_nonfinite(const float* data, std::int64_t count, cudaStream_t stream);

}  // namespace cnn::cuda
