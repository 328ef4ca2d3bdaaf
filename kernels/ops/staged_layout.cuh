// The staged layout of the convolution's tensor-core forms (conv_tensor_core.cu): NHWC tensors of
// 32-bit words in the precision's format (a tf32 value, or a bf16 pair c, c+1), channels padded with
// zeros to whole 16-byte chunks. What writes it besides the staging kernels (the max-pool's backward
// into the conv before it, maxpool.cu) packs its words here, so that both round alike.
#pragma once

#include <cstdint>

#include "cnn/choices.hpp"
#include "ops/mma_instructions.cuh"

namespace cnn::cuda {

// Elements of a 16-byte chunk, and of a 32-bit word (and its log2, the loaders' element -> word shift).
__host__ __device__ constexpr int chunk_elements(Precision p) { return p == Precision::kBf16 ? 8 : 4; }
__host__ __device__ constexpr int word_elements(Precision p) { return p == Precision::kBf16 ? 2 : 1; }
__host__ __device__ constexpr int word_shift(Precision p) { return p == Precision::kBf16 ? 1 : 0; }

#ifdef __CUDACC__
// One 32-bit word of the staged format: a tf32 value (second is ignored), or a bf16 pair.
template <Precision P>
__device__ __forceinline__ std::uint32_t pack_word(float first, float second) {
  return MmaFormat<P>::pack(first, MmaFormat<P>::kPerWord == 2 ? second : 0.0f);
}

// A chunk's 4 words from its chunk_elements(P) values.
template <Precision P>
__device__ __forceinline__ uint4 pack_chunk(const float (&v)[chunk_elements(P)]) {
  constexpr int kPerWord = MmaFormat<P>::kPerWord;
  std::uint32_t w[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) w[q] = pack_word<P>(v[kPerWord * q], v[kPerWord * q + kPerWord - 1]);
  return make_uint4(w[0], w[1], w[2], w[3]);
}
#endif

}  // namespace cnn::cuda
