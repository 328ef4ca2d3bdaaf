// Where kernels read a batch's input pixels from. The twins take a gathered float batch; the fused
// training step reads the resident uint8 data set through the batch's indices, so the batch is never
// copied out as floats (a quarter of the bytes, and no gather kernel). Both give the same floats:
// uint8 * kPixelScale, as gather_normalize.
#pragma once

#include <cstdint>

#include "seed_shape.hpp"

namespace cnn::cuda {

struct FloatSample {
  const float* pixels;  // [C, H, W]
  __device__ __forceinline__ float operator[](std::int64_t offset) const { return __ldg(pixels + offset); }
};

struct FloatBatch {
  const float* pixels;  // [n, C, H, W]
  std::int64_t image;   // C*H*W
  __device__ __forceinline__ FloatSample sample(std::int64_t s) const { return {pixels + s * image}; }
};

struct ByteSample {
  const std::uint8_t* pixels;  // [C, H, W]
  __device__ __forceinline__ float operator[](std::int64_t offset) const {
    return static_cast<float>(__ldg(pixels + offset)) * kPixelScale;
  }
};

struct GatheredBatch {
  const std::uint8_t* images;   // [N, C, H, W], the whole data set
  const std::int32_t* indices;  // [n], this batch's samples
  std::int64_t image;           // C*H*W
  __device__ __forceinline__ ByteSample sample(std::int64_t s) const {
    return {images + static_cast<std::int64_t>(__ldg(indices + s)) * image};
  }
};

}  // namespace cnn::cuda
