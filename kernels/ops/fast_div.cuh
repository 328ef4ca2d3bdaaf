// Division by a divisor fixed per launch (FastDiv), and the index decoding built on it. Shared by
// the implicit GEMM's loaders and the layer kernels (layer_ops_conv.cu, layer_ops_fc.cu, maxpool.cu).
#pragma once

#include <cstdint>

namespace cnn::cuda {

// n / d for 0 <= n < 2^31 by a multiply-high and a shift (the divisor is fixed per launch): index
// decoding inside the tile loops would otherwise cost a ~20-instruction integer division each.
struct FastDiv {
  std::uint32_t divisor = 1, multiplier = 0, shift = 0;
  FastDiv() = default;
  explicit FastDiv(int d) : divisor(static_cast<std::uint32_t>(d)) {
    if (d <= 1) return;
    int log2_ceil = 0;
    while ((std::uint64_t{1} << log2_ceil) < static_cast<std::uint64_t>(d)) ++log2_ceil;
    const int p = 31 + log2_ceil;
    multiplier = static_cast<std::uint32_t>(((std::uint64_t{1} << p) + d - 1) / static_cast<std::uint64_t>(d));
    shift = static_cast<std::uint32_t>(p - 32);
  }
#ifdef __CUDACC__
  __device__ __forceinline__ int div(int n) const {
    return divisor == 1 ? n : static_cast<int>(__umulhi(static_cast<std::uint32_t>(n), multiplier) >> shift);
  }
#endif
};

#ifdef __CUDACC__
// Element e of an [planes, height, width] tensor: its plane, its index r in the plane, row y, column x.
struct PlaneIndex {
  int plane, r, y, x;
};
__device__ __forceinline__ PlaneIndex split_plane_index(int e, const FastDiv& by_plane, const FastDiv& by_width) {
  const int plane = by_plane.div(e);
  const int r = e - plane * static_cast<int>(by_plane.divisor);
  const int y = by_width.div(r);
  return {plane, r, y, r - y * static_cast<int>(by_width.divisor)};
}
#endif  // __CUDACC__

}  // namespace cnn::cuda
