// TMA tensor maps (the driver's cuTensorMapEncodeTiled, reached through the runtime so that the
// program needs no link to libcuda): a dense tensor of 32-bit words, copied box by box into shared
// memory in the 64-byte swizzle that the warpgroup products' descriptors name (wgmma_tma_conv.cuh).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <initializer_list>

namespace cnn::cuda {

// The map of a dense tensor of 32-bit words at `base` (16-byte aligned) with `dims` (innermost first;
// 1 to 5 of them, each dimension's bytes a multiple of 16 but the last), copied in boxes of `box`
// (the innermost 16 words: 64 bytes, the swizzle's width). Elements outside the tensor read zero.
// Throws a cnn::Error naming the driver's error when the map is refused.
CUtensorMap encode_words_map(const void* base, std::initializer_list<std::uint64_t> dims,
                             std::initializer_list<unsigned> box);

}  // namespace cnn::cuda
