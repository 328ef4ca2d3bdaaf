// Launch-shape helpers shared by the launchers. Most kernels use grid-stride loops, so any grid is
// correct; these only pick one that fills the GPU without launching millions of idle blocks. (The
// conv layer's column sweep, conv_backward.cuh, needs a grid that covers its columns.)
#pragma once

#include <algorithm>
#include <cstdint>

#ifdef __CUDACC__
#include "cuda/cuda_check.hpp"
#endif

namespace cnn::cuda {

constexpr int kBlockThreads = 256;
// Enough resident blocks for any current GPU (132 SMs x 8 blocks x a few waves); grid-stride
// loops cover the rest.
constexpr std::int64_t kMaxGridBlocks = 1 << 16;

inline unsigned grid_for(std::int64_t work_items, int threads_per_block = kBlockThreads) {
  const std::int64_t blocks = (work_items + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, kMaxGridBlocks));
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

#ifdef __CUDACC__
__device__ __forceinline__ std::int64_t ceil_div_device(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Blocks of `kernel` that fit on one multiprocessor at `threads` per block and no dynamic shared
// memory: fixed per binary and GPU model, so plans built on it repeat.
template <class Kernel>
int resident_blocks_per_multiprocessor(Kernel kernel, int threads) {
  int count = 0;
  CNN_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, kernel, threads, 0));
  return count;
}
#endif

// Throws a UsageError naming `what` when `value` elements would not index with 32-bit integers.
void check_int_range(std::int64_t value, const char* what);

// Multiprocessors of the current device (cached per process; all ranks of a node see one model).
int multiprocessor_count();

// Whether the current device runs this binary's warpgroup product (wgmma_gemm.cuh): compute capability
// 9.0 and code built for sm_90a, as a one-thread probe kernel reports (once per device).
bool wgmma_available();

}  // namespace cnn::cuda
