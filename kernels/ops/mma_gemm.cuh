// The tensor-core form of the implicit matrix product (implicit_gemm.cuh), for --precision tf32 and
// bf16: the same loader concept (implicit im2col and friends, plus staged chunks) and the same stores
// (bias, ReLU, mask, split-K workspace), so every fusion of the fp32 product holds in every
// precision. Each operand element is rounded once, to tf32 (cvt.rna) or bf16 (round to nearest
// even), when it is loaded or staged, and warps multiply tiles with mma.sync (m16n8k8 tf32, or
// m16n8k16 bf16), accumulating in fp32.
//
// A block is 8 warps over a BM x BN tile; each warp owns a (BM/WARPS_M) x (BN/(8/WARPS_M)) piece of
// 16x8 mma tiles. Two stages: the next tile's loads are in flight during the current tile's mma,
// one barrier per tile, as in the fp32 kernel.
//
// Each operand comes in one of three forms (OperandPipe, by what its loader offers):
//   elements      single floats, rounded here (the fc layers; fp32-style loaders). A tile is held
//                 k-contiguous per row as 32-bit words (a tf32 element, or a bf16 pair k, k+1),
//                 kMmaTileWords (16) words per row padded to 20, so that the fragment reads
//                 (lane = 4 * row + word) hit 32 distinct banks. Which a thread loads (TileUnits):
//                 where consecutive k are adjacent in memory, 16 lanes walk a row's 16 words;
//                 otherwise a warp covers 8 rows x 4 words, lanes walking the rows.
//   chunks along k   16-byte chunks of 4 words, staged in the precision's format (the conv forward
//                 and input gradient, conv_tensor_core.cu); the same row-major tile.
//   chunks across    16-byte chunks of 4 or 8 consecutive rows at one k (the conv weight gradient);
//                 the tile held transposed, read with ldmatrix .trans.
//
// The order of every sum is fixed by the tile (the plan) and the mma instruction: results repeat bit
// for bit on the same GPU model.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "cnn/choices.hpp"
#include "cnn/errors.hpp"
#include "cuda/dependent_launch.cuh"
#include "ops/gemm_plan.hpp"

namespace cnn::cuda {

// The rounding and the mma instruction of each tensor-core precision. mma.sync with tf32 and bf16
// needs sm_80; the backend refuses these precisions on older GPUs (cuda_backend.cu), and older
// architectures compile the kernel to a trap.
template <Precision P>
struct MmaFormat;

template <>
struct MmaFormat<Precision::kTf32> {
  static constexpr int kPerWord = 1;  // elements of k per shared-memory word
  static __device__ __forceinline__ std::uint32_t pack(float v, float /*unused*/) {
    std::uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
#else
    (void)v;
#endif
    return r;
  }
  // d += a[16x8] * b[8x8]: one k step of 8 words.
  static __device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
    __trap();
#endif
  }
};

template <>
struct MmaFormat<Precision::kBf16> {
  static constexpr int kPerWord = 2;
  // k in the low half, k+1 in the high half: the mma's register order.
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&pair);
  }
  // d += a[16x16] * b[16x8]: one k step of 8 words.
  static __device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
    __trap();
#endif
  }
};

// ldmatrix .trans of 4 (2) 8x8 b16 matrices, rows addressed by lanes 0-31 (0-15).
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&f)[4], unsigned address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3])
               : "r"(address));
#else
  (void)f, (void)address;
  __trap();
#endif
}
__device__ __forceinline__ void ldmatrix_x2_trans(std::uint32_t (&f)[2], unsigned address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(f[0]), "=r"(f[1])
               : "r"(address));
#else
  (void)f, (void)address;
  __trap();
#endif
}

// The (row, word) units of a kRowsInTile x kMmaTileWords tile that thread t loads: kRows rows times
// kWords words each (see the header comment for the two lane layouts).
template <int kRowsInTile, bool kKContiguous>
struct TileUnits {
  static constexpr int kUnits = kRowsInTile * kMmaTileWords / kMmaThreads;
  static constexpr int kWords = kKContiguous ? 1 : (kUnits < 4 ? kUnits : 4);
  static constexpr int kRows = kUnits / kWords;
  // Rows-walking layout: 4 / kWords groups of words, each covered by kWarpsPerGroup warps.
  static constexpr int kWarpsPerGroup = kMmaThreads / 32 / (4 / kWords);
  static_assert(kUnits >= 1 && kUnits * kMmaThreads == kRowsInTile * kMmaTileWords, "tile rows: 32, 64 or 128");

  static __device__ __forceinline__ int row(int t, int i) {
    const int lane = t & 31, warp = t >> 5;
    if constexpr (kKContiguous) return 2 * (warp + 8 * i) + (lane >> 4);
    return 8 * (warp % kWarpsPerGroup + kWarpsPerGroup * i) + (lane & 7);
  }
  static __device__ __forceinline__ int word(int t, int j) {
    const int lane = t & 31, warp = t >> 5;
    if constexpr (kKContiguous) return lane & 15;
    return (lane >> 3) + 4 * ((warp / kWarpsPerGroup) * kWords + j);
  }
};

// Words per shared-memory row of a k tile, padded so that the fragment reads (lane = 4 * row + word)
// hit 32 distinct banks; rows stay 16-byte aligned for the chunk stores.
constexpr int kMmaRowStride = kMmaTileWords + 4;

// How a loader hands over its operand: single floats (rounded by the kernel); or 16-byte chunks
// already in the precision's format (the staged NHWC tensors of conv_tensor_core.cu), either 4 words
// along k (kChunked) or 4 or 8 elements along the rows, m or n (kChunkedAcross).
enum class OperandForm { kElements, kChunksAlongK, kChunksAcross };
template <class Loader, class = void>
struct chunked_along_k : std::false_type {};
template <class Loader>
struct chunked_along_k<Loader, std::void_t<decltype(Loader::kChunked)>> : std::bool_constant<Loader::kChunked> {};
template <class Loader, class = void>
struct chunked_across : std::false_type {};
template <class Loader>
struct chunked_across<Loader, std::void_t<decltype(Loader::kChunkedAcross)>>
    : std::bool_constant<Loader::kChunkedAcross> {};
template <class Loader>
constexpr OperandForm operand_form() {
  if constexpr (chunked_across<Loader>::value) return OperandForm::kChunksAcross;
  if constexpr (chunked_along_k<Loader>::value) return OperandForm::kChunksAlongK;
  return OperandForm::kElements;
}
template <class Loader>
struct is_chunked_loader : std::bool_constant<operand_form<Loader>() != OperandForm::kElements> {};

// The mma fragments of a tile held as rows of words along k ([rows][kMmaRowStride]): k step s (8
// words), rows r0.. of the operand. lane = 4 * group + quad.
struct RowMajorFragments {
  static __device__ __forceinline__ void a(const std::uint32_t (*tile)[kMmaRowStride], int s, int r0, int lane,
                                           std::uint32_t (&f)[4]) {
    const int r = r0 + (lane >> 2), w = 8 * s + (lane & 3);
    f[0] = tile[r][w];
    f[1] = tile[r + 8][w];
    f[2] = tile[r][w + 4];
    f[3] = tile[r + 8][w + 4];
  }
  static __device__ __forceinline__ void b(const std::uint32_t (*tile)[kMmaRowStride], int s, int c0, int lane,
                                           std::uint32_t (&f)[2]) {
    const int c = c0 + (lane >> 2), w = 8 * s + (lane & 3);
    f[0] = tile[c][w];
    f[1] = tile[c][w + 4];
  }
};

// One operand's share of each k tile: the units this thread loads, their loads in flight (next),
// their store into shared memory (a Tile), and the mma fragments read back from it. kRows rows of
// the operand (m for A, n for B) start at row0.
template <Precision P, int kRows, class Loader, OperandForm kForm = operand_form<Loader>()>
struct OperandPipe;

// Single floats, rounded here: TileUnits' rows x words per thread.
template <Precision P, int kRows, class Loader>
struct OperandPipe<P, kRows, Loader, OperandForm::kElements> : RowMajorFragments {
  using Tile = std::uint32_t[kRows][kMmaRowStride];
  using Units = TileUnits<kRows, Loader::kKContiguous>;
  using Format = MmaFormat<P>;
  typename Loader::Fixed fixed[Units::kRows];
  std::uint32_t next[Units::kRows][Units::kWords];

  __device__ __forceinline__ OperandPipe(const Loader& loader, int row0, int t) {
#pragma unroll
    for (int i = 0; i < Units::kRows; ++i) fixed[i] = loader.fixed(row0 + Units::row(t, i));
  }
  // Loads and rounds this thread's units of the tile at k0 (elements past k_end read 0).
  __device__ __forceinline__ void fetch(const Loader& loader, int t, int k0, int k_end) {
#pragma unroll
    for (int j = 0; j < Units::kWords; ++j) {
      const int k = k0 + Units::word(t, j) * Format::kPerWord;
      typename Loader::Step step[Format::kPerWord];
#pragma unroll
      for (int e = 0; e < Format::kPerWord; ++e) step[e] = loader.step(k + e);
#pragma unroll
      for (int i = 0; i < Units::kRows; ++i) {
        float v[2] = {0.0f, 0.0f};
#pragma unroll
        for (int e = 0; e < Format::kPerWord; ++e) v[e] = k + e < k_end ? loader.load(fixed[i], step[e]) : 0.0f;
        next[i][j] = Format::pack(v[0], v[1]);
      }
    }
  }
  __device__ __forceinline__ void stash(std::uint32_t (*tile)[kMmaRowStride], int t) const {
#pragma unroll
    for (int i = 0; i < Units::kRows; ++i)
#pragma unroll
      for (int j = 0; j < Units::kWords; ++j) tile[Units::row(t, i)][Units::word(t, j)] = next[i][j];
  }
};

// 16-byte chunks (4 words) in the precision's format: a row of the tile is 4 chunks, and lanes take
// the chunks of a row, then the next row (a warp: 8 rows). Loader concept:
//   kChunked = true;  Fixed fixed(int mn) const;  uint4 load_chunk(const Fixed&, int k) const
//   (the chunk of k .. k + 4 * kPerWord - 1, zeros out of range).
template <Precision P, int kRows, class Loader>
struct OperandPipe<P, kRows, Loader, OperandForm::kChunksAlongK> : RowMajorFragments {
  using Tile = std::uint32_t[kRows][kMmaRowStride];
  static constexpr int kChunks = kRows * kMmaTileWords / 4;
  static constexpr int kUnits = (kChunks + kMmaThreads - 1) / kMmaThreads;
  static constexpr int kChunkElements = 4 * MmaFormat<P>::kPerWord;
  typename Loader::Fixed fixed[kUnits];
  uint4 next[kUnits];

  static __device__ __forceinline__ bool active(int unit) { return kChunks % kMmaThreads == 0 || unit < kChunks; }
  __device__ __forceinline__ OperandPipe(const Loader& loader, int row0, int t) {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int unit = t + u * kMmaThreads;
      if (active(unit)) fixed[u] = loader.fixed(row0 + unit / 4);
    }
  }
  __device__ __forceinline__ void fetch(const Loader& loader, int t, int k0, int k_end) {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int unit = t + u * kMmaThreads;
      const int k = k0 + (unit % 4) * kChunkElements;
      if (active(unit)) next[u] = k < k_end ? loader.load_chunk(fixed[u], k) : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void stash(std::uint32_t (*tile)[kMmaRowStride], int t) const {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int unit = t + u * kMmaThreads;
      if (active(unit)) *reinterpret_cast<uint4*>(&tile[unit / 4][4 * (unit % 4)]) = next[u];
    }
  }
};

// 16-byte chunks across the rows: 4 (tf32) or 8 (bf16) consecutive rows (m or n) at one k, for an
// operand whose rows are contiguous in memory (the weight gradient's, conv_tensor_core.cu). The tile
// is held transposed, [k][rows + 8 elements] (so that the 8 rows a fragment read or an ldmatrix
// touches fall in distinct banks), and the fragments are read across it: with ldmatrix .trans for
// bf16 pairs, one word at a time for tf32. Lanes take consecutive chunks of a k row. Loader concept:
//   kChunkedAcross = true;  Fixed fixed(int row0) const (row0: a chunk's first row);
//   Step step(int k) const;  uint4 load_chunk(const Fixed&, const Step&) const (zeros out of range).
template <Precision P, int kRows, class Loader>
struct OperandPipe<P, kRows, Loader, OperandForm::kChunksAcross> {
  static constexpr bool kBf16 = P == Precision::kBf16;
  static constexpr int kBK = kMmaTileWords * MmaFormat<P>::kPerWord;
  static constexpr int kChunkRows = kBf16 ? 8 : 4;
  static constexpr int kStrideWords = (kRows + 8) / (kBf16 ? 2 : 1);
  using Tile = std::uint32_t[kBK][kStrideWords];
  static constexpr int kChunksPerK = kRows / kChunkRows;
  static constexpr int kChunks = kBK * kChunksPerK;
  static constexpr int kUnits = (kChunks + kMmaThreads - 1) / kMmaThreads;
  static_assert(kMmaThreads % kChunksPerK == 0, "a thread's chunk keeps its rows from tile to tile");
  typename Loader::Fixed fixed;
  uint4 next[kUnits];

  static __device__ __forceinline__ bool active(int unit) { return kChunks % kMmaThreads == 0 || unit < kChunks; }
  __device__ __forceinline__ OperandPipe(const Loader& loader, int row0, int t) {
    fixed = loader.fixed(row0 + (t % kChunksPerK) * kChunkRows);
  }
  __device__ __forceinline__ void fetch(const Loader& loader, int t, int k0, int k_end) {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int unit = t + u * kMmaThreads;
      const int k = k0 + unit / kChunksPerK;
      if (active(unit)) next[u] = k < k_end ? loader.load_chunk(fixed, loader.step(k)) : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void stash(std::uint32_t (*tile)[kStrideWords], int t) const {
    const int word = (t % kChunksPerK) * 4;
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int unit = t + u * kMmaThreads;
      if (active(unit)) *reinterpret_cast<uint4*>(&tile[unit / kChunksPerK][word]) = next[u];
    }
  }
  // Element (k, row) of the tile: its shared-memory address (bf16) or its word (tf32).
  static __device__ __forceinline__ unsigned address(const std::uint32_t (*tile)[kStrideWords], int k, int row) {
    return static_cast<unsigned>(__cvta_generic_to_shared(&tile[k][0])) + 2u * static_cast<unsigned>(row);
  }
  static __device__ __forceinline__ void a(const std::uint32_t (*tile)[kStrideWords], int s, int r0, int lane,
                                           std::uint32_t (&f)[4]) {
    if constexpr (kBf16) {
      // Matrix j = lane / 8 of x4: rows r0 + (j & 1) * 8, k 16s + (j >> 1) * 8 + lane % 8.
      const int j = lane >> 3;
      ldmatrix_x4_trans(f, address(tile, 16 * s + (j >> 1) * 8 + (lane & 7), r0 + (j & 1) * 8));
    } else {
      const int g = lane >> 2, q = lane & 3, k = 8 * s + q;
      f[0] = tile[k][r0 + g];
      f[1] = tile[k][r0 + g + 8];
      f[2] = tile[k + 4][r0 + g];
      f[3] = tile[k + 4][r0 + g + 8];
    }
  }
  static __device__ __forceinline__ void b(const std::uint32_t (*tile)[kStrideWords], int s, int c0, int lane,
                                           std::uint32_t (&f)[2]) {
    if constexpr (kBf16) {
      // Matrix j = (lane / 8) % 2 of x2: k 16s + j * 8 + lane % 8 (lanes 16-31 repeat 0-15's addresses).
      const int j = (lane >> 3) & 1;
      ldmatrix_x2_trans(f, address(tile, 16 * s + j * 8 + (lane & 7), c0));
    } else {
      const int g = lane >> 2, q = lane & 3, k = 8 * s + q;
      f[0] = tile[k][c0 + g];
      f[1] = tile[k + 4][c0 + g];
    }
  }
};

template <Precision P, int BM, int BN, int WARPS_M, class LoadA, class LoadB, class Store>
__global__ void __launch_bounds__(kMmaThreads)
    mma_gemm_kernel(LoadA load_a, LoadB load_b, Store store, int M, int N, int K, int k_per_split,
                    float* __restrict__ workspace /*[splits, N, M] when gridDim.z > 1*/) {
  start_after_previous_kernel();
  using Format = MmaFormat<P>;
  constexpr int BK = kMmaTileWords * Format::kPerWord;
  constexpr int WARPS_N = kMmaThreads / 32 / WARPS_M;
  constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  constexpr int MI = WM / 16, NJ = WN / 8;  // mma tiles per warp
  static_assert(MI >= 1 && NJ >= 1 && MI * 16 == WM && NJ * 8 == WN, "warp tile: multiples of 16 x 8");
  using PipeA = OperandPipe<P, BM, LoadA>;
  using PipeB = OperandPipe<P, BN, LoadB>;
  __shared__ __align__(16) typename PipeA::Tile As[2];
  __shared__ __align__(16) typename PipeB::Tile Bs[2];

  const int t = threadIdx.x;
  const int m0 = blockIdx.x * BM;
  const int n0 = blockIdx.y * BN;
  const int k_begin = blockIdx.z * k_per_split;
  const int k_end = min(K, k_begin + k_per_split);
  const int tiles = (k_end - k_begin + BK - 1) / BK;

  PipeA a(load_a, m0, t);
  PipeB b(load_b, n0, t);
  auto fetch = [&](int k0) {
    a.fetch(load_a, t, k0, k_end);
    b.fetch(load_b, t, k0, k_end);
  };
  auto stash = [&](int buf) {
    a.stash(As[buf], t);
    b.stash(Bs[buf], t);
  };

  const int warp = t >> 5, lane = t & 31;
  const int group = lane >> 2, quad = lane & 3;  // the mma fragments' row (column) and k index
  const int wm0 = (warp % WARPS_M) * WM;
  const int wn0 = (warp / WARPS_M) * WN;
  float acc[MI][NJ][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int h = 0; h < 4; ++h) acc[i][j][h] = 0.0f;

  if (tiles > 0) {
    fetch(k_begin);
    stash(0);
  }
  __syncthreads();
  int buf = 0;
  for (int tile = 0; tile < tiles; ++tile) {
    const bool more = tile + 1 < tiles;
    if (more) fetch(k_begin + (tile + 1) * BK);
#pragma unroll
    for (int s = 0; s < kMmaTileWords / 8; ++s) {  // mma k steps of 8 words
      std::uint32_t fa[MI][4], fb[NJ][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) PipeA::a(As[buf], s, wm0 + 16 * i, lane, fa[i]);
#pragma unroll
      for (int j = 0; j < NJ; ++j) PipeB::b(Bs[buf], s, wn0 + 8 * j, lane, fb[j]);
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j) Format::mma(acc[i][j], fa[i], fb[j]);
    }
    if (more) stash(buf ^ 1);
    __syncthreads();
    buf ^= 1;
  }

  // Accumulator h of mma tile (i, j): row group (+8 for h >= 2), column 2 * quad (+1 for odd h).
  float* split_out = gridDim.z == 1 ? nullptr : workspace + static_cast<std::int64_t>(blockIdx.z) * N * M;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const int m = m0 + wm0 + 16 * i + group + (h >= 2 ? 8 : 0);
        const int n = n0 + wn0 + 8 * j + 2 * quad + (h & 1);
        if (m >= M || n >= N) continue;
        if (split_out == nullptr)
          store(m, n, acc[i][j][h]);
        else
          split_out[static_cast<std::int64_t>(n) * M + m] = acc[i][j][h];
      }
}

// Queues the product's main kernel for plan's tile, one of kMmaTiles (gemm_plan.hpp); launch_gemm
// queues the split-K sum after it.
template <Precision P, class LoadA, class LoadB, class Store>
void launch_mma_tile(const GemmPlan& plan, const LoadA& a, const LoadB& b, const Store& store, float* workspace,
                     cudaStream_t stream) {
  const dim3 grid = plan.grid();
#define CNN_MMA_CASE(BM_, BN_, WM_)                                                                             \
  if (plan.bm == BM_ && plan.bn == BN_) {                                                                      \
    launch_dependent(mma_gemm_kernel<P, BM_, BN_, WM_, LoadA, LoadB, Store>, grid, kMmaThreads, 0, stream, a, b, \
                     store, plan.m, plan.n, plan.k, plan.k_per_split, workspace);                              \
    return;                                                                                                    \
  }
  CNN_MMA_CASE(128, 128, 2)
  CNN_MMA_CASE(128, 64, 4)
  CNN_MMA_CASE(64, 128, 2)
  CNN_MMA_CASE(64, 64, 2)
  CNN_MMA_CASE(128, 32, 4)
  CNN_MMA_CASE(64, 32, 4)
  CNN_MMA_CASE(32, 64, 2)
  CNN_MMA_CASE(32, 32, 2)
#undef CNN_MMA_CASE
  throw Error(ExitCode::kFailure, "internal error: no tensor-core gemm tile " + std::to_string(plan.bm) + "x" +
                                      std::to_string(plan.bn));
}

}  // namespace cnn::cuda
