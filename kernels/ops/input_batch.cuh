// Where kernels read a batch's input pixels from. The twins take a gathered float batch; the fused
// training step reads the resident uint8 data set through the batch's indices, so the batch is never
// copied out as floats (a quarter of the bytes, and no gather kernel). All give the same floats:
// uint8 * kPixelScale, as gather_normalize.
//
// The conv layer's backward sweep (conv_backward.cuh) reads, per (sample, pool cell), the 3x3 window
// of the pool winner inside the cell's 4x4 input patch, through `prefetch` (issued before the
// winner is known) and `window`. FloatBatch reads the window from the image (nine scattered loads);
// PatchBatch reads the patch the fused forward saved from GatheredBatch (one 16-byte load per channel).
#pragma once

#include <cstdint>

#include "ops/seed_shape.hpp"

namespace cnn::cuda {

// Where one pool cell's 4x4 input patch sits.
struct PoolCellSite {
  int cell;             // py * PW + px
  std::int64_t origin;  // offset of the patch's top-left pixel (2py, 2px) in a channel plane
  int width;            // W
  std::int64_t plane;   // H * W
};

struct NoPrefetch {};

struct FloatSample {
  const float* pixels;  // [C, H, W]
  __device__ __forceinline__ float operator[](std::int64_t offset) const { return __ldg(pixels + offset); }
};

struct FloatBatch {
  const float* pixels;  // [n, C, H, W]
  std::int64_t image;   // C*H*W
  __device__ __forceinline__ FloatSample sample(std::int64_t s) const { return {pixels + s * image}; }
  __device__ __forceinline__ NoPrefetch prefetch(std::int64_t, const PoolCellSite&) const { return {}; }
  // The 3x3 window at the pool winner (a, b) = (winner >> 1, winner & 1), read from the image.
  template <int C>
  __device__ __forceinline__ void window(float (&x)[C][kSeedKernel][kSeedKernel], NoPrefetch, std::int64_t s,
                                         const PoolCellSite& site, int winner) const {
    const FloatSample pixels = sample(s);
    const std::int64_t window = site.origin + (winner >> 1) * site.width + (winner & 1);
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int i = 0; i < kSeedKernel; ++i)
#pragma unroll
        for (int k = 0; k < kSeedKernel; ++k) x[c][i][k] = pixels[window + c * site.plane + i * site.width + k];
  }
};

// A pixel's float (uint8 * kPixelScale, as gather_normalize) from m = 2^23 + the byte (the byte in
// the low mantissa bits of 2^23, exponent byte 0x4B): one fma gives m * s - 2^23 * s = byte * s
// rounded once, the bits of (float)byte * s (2^23 * s is exact: a power of 2 times a float; checked
// for all 256 bytes, and trained checkpoints are bitwise those of the conversion). Hopper issues
// conversions (I2F) at 16 a clock per multiprocessor, an eighth of the rate of fmas: the first
// layer's weight-gradient sweep (27 pixels per sample and column at three channels) went from 127 to
// 100 us at batch 2048 through the permuted form and then this one, and the seed's fused step 3-4%
// faster at batch 1000 (docs/PERFORMANCE.md, "Twelfth part" and "Thirteenth part").
__device__ __forceinline__ float pixel_from_mantissa(unsigned m) {
  constexpr float kOffset = -8388608.0f * kPixelScale;
  return fmaf(__uint_as_float(m), kPixelScale, kOffset);
}
// A pixel byte's float.
__device__ __forceinline__ float pixel_value(unsigned byte) { return pixel_from_mantissa(0x4B000000u | byte); }
struct ByteSample {
  const std::uint8_t* pixels;  // [C, H, W]
  __device__ __forceinline__ float operator[](std::int64_t offset) const {
    return pixel_value(__ldg(pixels + offset));
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

// A 4x4 uint8 patch as one 16-byte word: row u in component u, column v in byte v (little end first).
__device__ __forceinline__ unsigned& patch_row(uint4& p, int u) {
  return u == 0 ? p.x : (u == 1 ? p.y : (u == 2 ? p.z : p.w));
}
__device__ __forceinline__ unsigned patch_row(const uint4& p, int u) {
  return u == 0 ? p.x : (u == 1 ? p.y : (u == 2 ? p.z : p.w));
}
// Byte v of a packed row, as the float the twins see: a byte permute moves it into 2^23's mantissa.
__device__ __forceinline__ float patch_pixel(unsigned row, int v) {
  return pixel_from_mantissa(__byte_perm(row, 0x4B000000u, 0x7540u | static_cast<unsigned>(v)));
}

// One pool cell's 4x4 input patch per channel from a uint8 image (pixels: the patch's top-left
// pixel in channel 0), both as the floats the twins see and packed for PatchBatch. Where !valid,
// nothing is read and the patch is zero.
template <int C>
__device__ __forceinline__ void read_byte_patch(float (&patch)[C][kPatch][kPatch], uint4 (&packed)[C],
                                                const std::uint8_t* pixels, std::int64_t plane, int width,
                                                bool valid) {
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int u = 0; u < kPatch; ++u) {
      unsigned row = 0;
#pragma unroll
      for (int v = 0; v < kPatch; ++v)
        row |= (valid ? static_cast<unsigned>(__ldg(pixels + c * plane + u * width + v)) : 0u) << (8 * v);
      patch_row(packed[c], u) = row;
#pragma unroll
      for (int v = 0; v < kPatch; ++v) patch[c][u][v] = patch_pixel(row, v);
    }
}

// The fused training step's copy of every (sample, pool cell) input patch, written by its forward
// pass: [n][C][P] words (consecutive cells adjacent, so a warp's loads are contiguous). At 16 bytes
// per cell and channel it is small (2.7 MB for 1000 28x28 images) and stays in L2 while the sweep
// reads each patch once per filter.
template <int C>
struct PatchBatch {
  const uint4* patches;  // [n][C][P]
  int cells;             // P
  struct Prefetch {
    uint4 rows[C];
  };
  __device__ __forceinline__ Prefetch prefetch(std::int64_t s, const PoolCellSite& site) const {
    Prefetch p;
#pragma unroll
    for (int c = 0; c < C; ++c) p.rows[c] = __ldg(patches + (s * C + c) * cells + site.cell);
    return p;
  }
  // The winner picks three of the four rows (down by a) and three of the four bytes (right by b).
  template <int CC>
  __device__ __forceinline__ void window(float (&x)[CC][kSeedKernel][kSeedKernel], const Prefetch& p, std::int64_t,
                                         const PoolCellSite&, int winner) const {
    static_assert(CC == C, "one channel count");
    const bool down = (winner >> 1) != 0;
    const int right = winner & 1;
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int i = 0; i < kSeedKernel; ++i) {
        const unsigned row = down ? patch_row(p.rows[c], i + 1) : patch_row(p.rows[c], i);
#pragma unroll
        for (int k = 0; k < kSeedKernel; ++k) x[c][i][k] = patch_pixel(row, k + right);
      }
  }
};

}  // namespace cnn::cuda
