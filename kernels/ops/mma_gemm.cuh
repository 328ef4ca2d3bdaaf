// The tensor-core form of the implicit matrix product (implicit_gemm.cuh), for --precision tf32 and
// bf16: the same loader concept (implicit im2col and friends, plus staged chunks) and the same stores
// (bias, ReLU, mask, split-K workspace), so every fusion of the fp32 product holds in every
// precision. Each operand element is rounded once, to tf32 (cvt.rna) or bf16 (round to nearest
// even), when it is loaded or staged, and warps multiply tiles with mma.sync (m16n8k8 tf32, or
// m16n8k16 bf16), accumulating in fp32.
//
// A block is 8 warps over a BM x BN tile; each warp owns a (BM/WARPS_M) x (BN/(8/WARPS_M)) piece of
// 16x8 mma tiles, with one barrier per k tile. Two pipelines, by the operands' form:
//   elements  (mma_gemm_kernel) the next tile's loads go to registers during the current tile's
//             mma, and are rounded and stored to shared memory after it: two stages.
//   chunks    (mma_gemm_async_kernel) 16-byte chunks go from global to shared memory with cp.async,
//             through registers never, 2 to 4 stages deep (as many as 48 KiB of shared memory
//             holds): three k tiles in flight where the register path had one, and no registers
//             held for them.
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

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>

#include "cnn/choices.hpp"
#include "cnn/errors.hpp"
#include "cuda/dependent_launch.cuh"
#include "ops/gemm_plan.hpp"
#include "ops/mma_instructions.cuh"

namespace cnn::cuda {

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

// How a loader hands over its operand: single floats (rounded by the kernel); or the addresses of
// 16-byte chunks already in the precision's format (the staged NHWC tensors of conv_tensor_core.cu),
// either 4 words along k (kChunked) or 4 or 8 elements along the rows, m or n (kChunkedAcross).
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
// words), rows r0.. of the operand, read with ldmatrix (one instruction where 32-bit loads took 4
// for A and 2 for B). Rows are 80 bytes apart, so the 8 rows of a matrix fall in distinct banks.
struct RowMajorFragments {
  // Matrices 0-3: rows r0 + 0 / + 8 (lane bit 3), words 8s + 0 / + 4 (lane bit 4): a0..a3.
  static __device__ __forceinline__ void a(const std::uint32_t (*tile)[kMmaRowStride], int s, int r0, int lane,
                                           std::uint32_t (&f)[4]) {
    const int r = r0 + (lane & 7) + ((lane >> 3) & 1) * 8, w = 8 * s + (lane >> 4) * 4;
    ldmatrix_x4(f, shared_address(&tile[r][w]));
  }
  // Matrices 0-1: rows c0 + 0..7, words 8s + 0 / + 4 (lane bit 3): b0, b1.
  static __device__ __forceinline__ void b(const std::uint32_t (*tile)[kMmaRowStride], int s, int c0, int lane,
                                           std::uint32_t (&f)[2]) {
    const int c = c0 + (lane & 7), w = 8 * s + ((lane >> 3) & 1) * 4;
    ldmatrix_x2(f, shared_address(&tile[c][w]));
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

// 16-byte chunks (4 words) in the precision's format, copied with cp.async: a row of the tile is 4
// chunks, and lanes take the chunks of a row, then the next row (a warp: 8 rows). Loader concept:
//   kChunked = true;  Fixed fixed(int mn) const;  const uint4* chunk_source(const Fixed&, int k) const
//   (the chunk of k .. k + 4 * kPerWord - 1; nullptr where it lies outside the operand: zeros).
template <Precision P, int kRows, class Loader>
struct OperandPipe<P, kRows, Loader, OperandForm::kChunksAlongK> : RowMajorFragments {
  using Tile = std::uint32_t[kRows][kMmaRowStride];
  static constexpr int kChunks = kRows * kMmaTileWords / 4;
  static constexpr int kUnits = (kChunks + kMmaThreads - 1) / kMmaThreads;
  static constexpr int kChunkElements = 4 * MmaFormat<P>::kPerWord;
  typename Loader::Fixed fixed[kUnits];

  static __device__ __forceinline__ bool active(int unit) { return kChunks % kMmaThreads == 0 || unit < kChunks; }
  __device__ __forceinline__ OperandPipe(const Loader& loader, int row0, int t) {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int unit = t + u * kMmaThreads;
      if (active(unit)) fixed[u] = loader.fixed(row0 + unit / 4);
    }
  }
  // Queues this thread's chunks of the k tile at k0 into `tile` (chunks at k_end and past: zeros).
  __device__ __forceinline__ void issue(std::uint32_t (*tile)[kMmaRowStride], const Loader& loader, int t, int k0,
                                        int k_end) const {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int unit = t + u * kMmaThreads;
      const int k = k0 + (unit % 4) * kChunkElements;
      if (active(unit))
        cp_async_chunk(&tile[unit / 4][4 * (unit % 4)], k < k_end ? loader.chunk_source(fixed[u], k) : nullptr);
    }
  }
};

// 16-byte chunks across the rows: 4 (tf32) or 8 (bf16) consecutive rows (m or n) at one k, for an
// operand whose rows are contiguous in memory (the weight gradient's, conv_tensor_core.cu). The tile
// is held transposed, [k][rows + 8 elements] (so that the 8 rows a fragment read or an ldmatrix
// touches fall in distinct banks), and the fragments are read across it: with ldmatrix .trans for
// bf16 pairs, one word at a time for tf32. Lanes take consecutive chunks of a k row, copied with
// cp.async. Loader concept:
//   kChunkedAcross = true;  Fixed fixed(int row0) const (row0: a chunk's first row);
//   Step step(int k) const;  const uint4* chunk_source(const Fixed&, const Step&) const (nullptr: zeros).
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

  static __device__ __forceinline__ bool active(int unit) { return kChunks % kMmaThreads == 0 || unit < kChunks; }
  __device__ __forceinline__ OperandPipe(const Loader& loader, int row0, int t) {
    fixed = loader.fixed(row0 + (t % kChunksPerK) * kChunkRows);
  }
  // Queues this thread's chunks of the k tile at k0 into `tile` (k at k_end and past: zeros).
  __device__ __forceinline__ void issue(std::uint32_t (*tile)[kStrideWords], const Loader& loader, int t, int k0,
                                        int k_end) const {
    const int word = (t % kChunksPerK) * 4;
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int unit = t + u * kMmaThreads;
      const int k = k0 + unit / kChunksPerK;
      if (active(unit))
        cp_async_chunk(&tile[unit / kChunksPerK][word], k < k_end ? loader.chunk_source(fixed, loader.step(k)) : nullptr);
    }
  }
  // Element (k, row) of the tile: its shared-memory address (bf16) or its word (tf32).
  static __device__ __forceinline__ unsigned address(const std::uint32_t (*tile)[kStrideWords], int k, int row) {
    return shared_address(&tile[k][0]) + 2u * static_cast<unsigned>(row);
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

// What both kernels share: a warp's place in the block tile, its accumulators, the mma of one k tile
// held in shared memory, and the store of the results.
template <Precision P, int BM, int BN, int WARPS_M, class PipeA, class PipeB>
struct MmaWarpTile {
  using Format = MmaFormat<P>;
  static constexpr int WARPS_N = kMmaThreads / 32 / WARPS_M;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  static constexpr int MI = WM / 16, NJ = WN / 8;  // mma tiles per warp
  static_assert(MI >= 1 && NJ >= 1 && MI * 16 == WM && NJ * 8 == WN, "warp tile: multiples of 16 x 8");
  int lane, wm0, wn0;
  float acc[MI][NJ][4];

  __device__ __forceinline__ explicit MmaWarpTile(int t) {
    const int warp = t >> 5;
    lane = t & 31;
    wm0 = (warp % WARPS_M) * WM;
    wn0 = (warp / WARPS_M) * WN;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int h = 0; h < 4; ++h) acc[i][j][h] = 0.0f;
  }

  template <class TileA, class TileB>
  __device__ __forceinline__ void multiply(const TileA* as, const TileB* bs) {
#pragma unroll
    for (int s = 0; s < kMmaTileWords / 8; ++s) {  // mma k steps of 8 words
      std::uint32_t fa[MI][4], fb[NJ][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) PipeA::a(as, s, wm0 + 16 * i, lane, fa[i]);
#pragma unroll
      for (int j = 0; j < NJ; ++j) PipeB::b(bs, s, wn0 + 8 * j, lane, fb[j]);
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j) Format::mma(acc[i][j], fa[i], fb[j]);
    }
  }

  // Accumulator h of mma tile (i, j): row group (+8 for h >= 2), column 2 * quad (+1 for odd h).
  // One split of several writes its partial sums to the workspace, [splits, N, M].
  template <class Store>
  __device__ __forceinline__ void store(const Store& store, int m0, int n0, int M, int N, float* workspace) const {
    const int group = lane >> 2, quad = lane & 3;
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
};

// This block's tile of the output (m0, n0) and its split's k range [k_begin, k_end), `tiles` k tiles
// of BK.
struct BlockTile {
  int m0, n0, k_begin, k_end, tiles;
  __device__ __forceinline__ BlockTile(int bm, int bn, int bk, int K, int k_per_split)
      : m0(blockIdx.x * bm), n0(blockIdx.y * bn), k_begin(blockIdx.z * k_per_split),
        k_end(min(K, k_begin + k_per_split)), tiles((k_end - k_begin + bk - 1) / bk) {}
};

// The element form: two stages through registers (the fc layers).
template <Precision P, int BM, int BN, int WARPS_M, class LoadA, class LoadB, class Store>
__global__ void __launch_bounds__(kMmaThreads)
    mma_gemm_kernel(LoadA load_a, LoadB load_b, Store store, int M, int N, int K, int k_per_split,
                    float* __restrict__ workspace /*[splits, N, M] when gridDim.z > 1*/) {
  start_after_previous_kernel();
  constexpr int BK = kMmaTileWords * MmaFormat<P>::kPerWord;
  using PipeA = OperandPipe<P, BM, LoadA>;
  using PipeB = OperandPipe<P, BN, LoadB>;
  __shared__ __align__(16) typename PipeA::Tile As[2];
  __shared__ __align__(16) typename PipeB::Tile Bs[2];

  const int t = threadIdx.x;
  const BlockTile block(BM, BN, BK, K, k_per_split);
  const int m0 = block.m0, n0 = block.n0, k_begin = block.k_begin, k_end = block.k_end, tiles = block.tiles;

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
  MmaWarpTile<P, BM, BN, WARPS_M, PipeA, PipeB> warp(t);

  if (tiles > 0) {
    fetch(k_begin);
    stash(0);
  }
  __syncthreads();
  int buf = 0;
  for (int tile = 0; tile < tiles; ++tile) {
    const bool more = tile + 1 < tiles;
    if (more) fetch(k_begin + (tile + 1) * BK);
    warp.multiply(As[buf], Bs[buf]);
    if (more) stash(buf ^ 1);
    __syncthreads();
    buf ^= 1;
  }
  warp.store(store, m0, n0, M, N, workspace);
}

// Stages of the chunk form: as many as 48 KiB of static shared memory holds, 2 to 4.
template <class PipeA, class PipeB>
struct AsyncStages {
  static constexpr int kBytes = static_cast<int>(sizeof(typename PipeA::Tile) + sizeof(typename PipeB::Tile));
  static constexpr int kFit = 48 * 1024 / kBytes;
  static constexpr int value = kFit > 4 ? 4 : kFit < 2 ? 2 : kFit;
};

// The chunk form: kStages k tiles in shared memory, filled by cp.async. At tile t the block waits for
// tile t's copies, then queues tile t + kStages - 1 into the stage that tile t - 1 used (the barrier
// has just seen every warp finish with it), then multiplies tile t. One group is committed per tile,
// empty at the end, so that "all but kStages - 2 groups done" always means "tile t is here".
template <Precision P, int BM, int BN, int WARPS_M, class LoadA, class LoadB, class Store>
__global__ void __launch_bounds__(kMmaThreads)
    mma_gemm_async_kernel(LoadA load_a, LoadB load_b, Store store, int M, int N, int K, int k_per_split,
                          float* __restrict__ workspace /*[splits, N, M] when gridDim.z > 1*/) {
  start_after_previous_kernel();
  constexpr int BK = kMmaTileWords * MmaFormat<P>::kPerWord;
  using PipeA = OperandPipe<P, BM, LoadA>;
  using PipeB = OperandPipe<P, BN, LoadB>;
  constexpr int kStages = AsyncStages<PipeA, PipeB>::value;
  __shared__ __align__(16) typename PipeA::Tile As[kStages];
  __shared__ __align__(16) typename PipeB::Tile Bs[kStages];

  const int t = threadIdx.x;
  const BlockTile block(BM, BN, BK, K, k_per_split);
  const int m0 = block.m0, n0 = block.n0, k_begin = block.k_begin, k_end = block.k_end, tiles = block.tiles;

  const PipeA a(load_a, m0, t);
  const PipeB b(load_b, n0, t);
  auto issue = [&](int tile) {
    if (tile < tiles) {
      const int stage = tile % kStages;
      a.issue(As[stage], load_a, t, k_begin + tile * BK, k_end);
      b.issue(Bs[stage], load_b, t, k_begin + tile * BK, k_end);
    }
    cp_async_commit();
  };
  MmaWarpTile<P, BM, BN, WARPS_M, PipeA, PipeB> warp(t);

#pragma unroll
  for (int tile = 0; tile < kStages - 1; ++tile) issue(tile);
  for (int tile = 0; tile < tiles; ++tile) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    issue(tile + kStages - 1);
    const int stage = tile % kStages;
    warp.multiply(As[stage], Bs[stage]);
  }
  cp_async_wait<0>();
  warp.store(store, m0, n0, M, N, workspace);
}

// Queues the product's main kernel for plan's tile, one of kMmaTiles (gemm_plan.hpp), walking the
// list at compile time from entry I; launch_gemm queues the split-K sum after it. Chunked operands
// (both or neither) take the cp.async kernel.
template <Precision P, std::size_t I = 0, class LoadA, class LoadB, class Store>
void launch_mma_tile(const GemmPlan& plan, const LoadA& a, const LoadB& b, const Store& store, float* workspace,
                     cudaStream_t stream) {
  static_assert(is_chunked_loader<LoadA>::value == is_chunked_loader<LoadB>::value,
                "both operands chunked (cp.async) or both elements (registers)");
  if constexpr (I < std::size(kMmaTiles)) {
    constexpr MmaTile tile = kMmaTiles[I];
    if (plan.bm != tile.bm || plan.bn != tile.bn) {
      launch_mma_tile<P, I + 1>(plan, a, b, store, workspace, stream);
      return;
    }
    if constexpr (is_chunked_loader<LoadA>::value)
      launch_dependent(mma_gemm_async_kernel<P, tile.bm, tile.bn, tile.warps_m, LoadA, LoadB, Store>, plan.grid(),
                       kMmaThreads, 0, stream, a, b, store, plan.m, plan.n, plan.k, plan.k_per_split, workspace);
    else
      launch_dependent(mma_gemm_kernel<P, tile.bm, tile.bn, tile.warps_m, LoadA, LoadB, Store>, plan.grid(),
                       kMmaThreads, 0, stream, a, b, store, plan.m, plan.n, plan.k, plan.k_per_split, workspace);
  } else {
    throw Error(ExitCode::kFailure, "internal error: no tensor-core gemm tile " + std::to_string(plan.bm) + "x" +
                                        std::to_string(plan.bn));
  }
}

}  // namespace cnn::cuda
