// The staged layout of the convolution's tensor-core forms (conv_tensor_core.cu): NHWC tensors of
// 32-bit words in the precision's format (a tf32 value, or a bf16 pair c, c+1), channels padded with
// zeros to whole 16-byte chunks. What writes it besides the staging kernels (the max-pool's backward
// into the conv before it, maxpool.cu) packs its words here, so that both round alike.
#pragma once

#include <cstdint>

#include "cnn/choices.hpp"
#include "ops/fast_div.cuh"
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

// The staged words of an NCHW tensor, written one element at a time by a product's store beside its
// fp32 element (ConvForwardStore, conv_products.cuh): element q = c * pixels + p of sample s goes to
// the NHWC position (s, p, c), a tf32 word or one bf16 half of a word, rounded as pack_word rounds it.
// The thread that writes a pixel's last channel also writes the padding channels' zeros, so every
// word is written. Also where a flattening lies between the two (a conv's [F, OH*OW] output as an fc
// layer's 1x1 input of F*OH*OW channels: pixels 1, and q is the fp32 element's own offset).
struct StagedScatter {
  std::uint32_t* words = nullptr;  // null: none
  bool bf16 = false;
  int channels = 0, channels_padded = 0;
  FastDiv by_pixels;  // pixels a sample
#ifdef __CUDACC__
  __device__ __forceinline__ void put(int s, int q, float v) const {
    const int c = by_pixels.div(q);
    const int p = q - c * static_cast<int>(by_pixels.divisor);
    const std::int64_t at = (static_cast<std::int64_t>(s) * by_pixels.divisor + p) * channels_padded;
    put_element(at + c, v);
    if (c == channels - 1)
      for (int pad = channels; pad < channels_padded; ++pad) put_element(at + pad, 0.0f);
  }
  __device__ __forceinline__ void put_element(std::int64_t e, float v) const {
    if (bf16)
      reinterpret_cast<unsigned short*>(words)[e] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    else
      words[e] = pack_word<Precision::kTf32>(v, 0.0f);
  }
#endif
};

}  // namespace cnn::cuda
