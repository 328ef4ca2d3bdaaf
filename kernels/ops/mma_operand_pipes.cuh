// The operands of the tensor-core product (mma_gemm.cuh): how a thread's share of each k tile of A or
// B gets from its loader into shared memory, and how a warp reads its mma fragments back. kThreads
// threads (4 or 8 warps, the tile's; gemm_plan.hpp) share a tile.
//
// Each operand comes in one of three forms (OperandPipe, by what its loader offers):
//   elements      single floats, rounded here (the fc layers; fp32-style loaders). A tile is held
//                 k-contiguous per row as 32-bit words (a tf32 element, or a bf16 pair k, k+1),
//                 kMmaTileWords (16) words per row padded to 20, so that the fragment reads
//                 (lane = 4 * row + word) hit 32 distinct banks. Which a thread loads (TileUnits):
//                 where consecutive k are adjacent in memory, 16 lanes walk a row's 16 words;
//                 otherwise a warp covers 8 rows x 4 words, lanes walking the rows.
//   chunks along k   16-byte chunks of 4 words, staged in the precision's format (the conv forward
//                 and input gradient, conv_chunk_loaders.cuh); the same row-major tile, or
//                 (wgmma_gemm.cuh) unpadded rows in the 64-byte swizzle.
//   chunks across    16-byte chunks of 4 or 8 consecutive rows at one k (the conv weight gradient);
//                 the tile held transposed, read with ldmatrix .trans.
//
// The chunk forms keep each chunk's k decoded in registers from tile to tile (the loader's Cursor or
// Step, advanced by one k tile by adding, with carries), instead of decoding k with two divisions
// per chunk and tile; only the bounds tests (padding, image edge, the end of k) stay per chunk.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cnn/choices.hpp"
#include "ops/gemm_plan.hpp"
#include "ops/mma_instructions.cuh"

namespace cnn::cuda {

// The (row, word) units of a kRowsInTile x kMmaTileWords tile that thread t of kThreads loads: kRows
// rows times kWords words each (see the header comment for the two lane layouts).
template <int kRowsInTile, bool kKContiguous, int kThreads>
struct TileUnits {
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kUnits = kRowsInTile * kMmaTileWords / kThreads;
  static constexpr int kWords = kKContiguous ? 1 : (kUnits < 4 ? kUnits : 4);
  static constexpr int kRows = kUnits / kWords;
  // Rows-walking layout: 4 / kWords groups of words, each covered by kWarpsPerGroup warps.
  static constexpr int kWarpsPerGroup = kWarps / (4 / kWords);
  static_assert(kUnits >= 1 && kUnits * kThreads == kRowsInTile * kMmaTileWords, "tile rows: 32 to 256");
  static_assert(kWarpsPerGroup >= 1, "a group of words needs a warp");

  static __device__ __forceinline__ int row(int t, int i) {
    const int lane = t & 31, warp = t >> 5;
    if constexpr (kKContiguous) return 2 * (warp + kWarps * i) + (lane >> 4);
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

// Where the chunks along k go in a tile's row (the chunk forms along k):
//   PaddedRows      rows of kMmaRowStride words, chunk c at word 4c (mma.sync's ldmatrix reads);
//   Swizzled64Rows  unpadded rows of 64 bytes, chunk c of row r at chunk c ^ (r / 2 % 4): the 64-byte
//                   swizzle that wgmma's descriptors name (wgmma_instructions.cuh), in which the 8 rows
//                   the tensor cores read at once fall in distinct banks.
struct PaddedRows {
  static constexpr int kStride = kMmaRowStride;
  static __device__ __forceinline__ int chunk_word(int /*row*/, int chunk) { return 4 * chunk; }
};
struct Swizzled64Rows {
  static constexpr int kStride = kMmaTileWords;
  static __device__ __forceinline__ int chunk_word(int row, int chunk) { return 4 * (chunk ^ ((row >> 1) & 3)); }
};

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
  // Two n tiles in one instruction, matrices 0-3: rows c0 + 0 / + 8 (lane bit 4), words 8s + 0 / + 4
  // (lane bit 3): b0, b1 of the tile at c0, then of the tile at c0 + 8.
  static __device__ __forceinline__ void b_pair(const std::uint32_t (*tile)[kMmaRowStride], int s, int c0, int lane,
                                                std::uint32_t (&f)[4]) {
    const int c = c0 + (lane & 7) + (lane >> 4) * 8, w = 8 * s + ((lane >> 3) & 1) * 4;
    ldmatrix_x4(f, shared_address(&tile[c][w]));
  }
};

// One operand's share of each k tile: the units this thread loads, their loads in flight (next),
// their store into shared memory (a Tile), and the mma fragments read back from it. kRows rows of
// the operand (m for A, n for B) start at row0.
// Rows is the chunk forms' row layout along k (PaddedRows for mma.sync, Swizzled64Rows for wgmma).
template <Precision P, int kRows, int kThreads, class Loader, OperandForm kForm = operand_form<Loader>(),
          class Rows = PaddedRows>
struct OperandPipe;

// Single floats, rounded here: TileUnits' rows x words per thread.
template <Precision P, int kRows, int kThreads, class Loader>
struct OperandPipe<P, kRows, kThreads, Loader, OperandForm::kElements, PaddedRows> : RowMajorFragments {
  using Tile = std::uint32_t[kRows][kMmaRowStride];
  using Units = TileUnits<kRows, Loader::kKContiguous, kThreads>;
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
// chunks, and lanes take the chunks of a row, then the next row (a warp: 8 rows). A thread's chunks
// all sit at one k (kThreads is a multiple of 4), so one Cursor serves them all. Loader concept:
//   kChunked = true;  Fixed fixed(int mn) const;
//   Cursor cursor(int k) const (k decoded, once per block);  void advance(Cursor&) const (k += the
//   kernel's k tile, set on the host by for_k_tile);
//   const uint4* chunk_source(const Fixed&, const Cursor&) const (the chunk of k .. k + 4 * kPerWord
//   - 1 at k < K; nullptr where it lies outside the operand: zeros).
template <Precision P, int kRows, int kThreads, class Loader, class Rows>
struct OperandPipe<P, kRows, kThreads, Loader, OperandForm::kChunksAlongK, Rows> : RowMajorFragments {
  using Tile = std::uint32_t[kRows][Rows::kStride];
  static constexpr int kChunks = kRows * kMmaTileWords / 4;
  static constexpr int kUnits = (kChunks + kThreads - 1) / kThreads;
  static constexpr int kChunkElements = 4 * MmaFormat<P>::kPerWord;
  static constexpr int kTileK = kMmaTileWords * MmaFormat<P>::kPerWord;
  static_assert(kThreads % 4 == 0, "a thread's chunks share one k");
  typename Loader::Fixed fixed[kUnits];
  typename Loader::Cursor cursor;  // k, decoded
  int k;                           // the k of this thread's chunks in the next tile to issue

  static __device__ __forceinline__ bool active(int unit) { return kChunks % kThreads == 0 || unit < kChunks; }
  __device__ __forceinline__ OperandPipe(const Loader& loader, int row0, int t, int k_begin) {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int unit = t + u * kThreads;
      if (active(unit)) fixed[u] = loader.fixed(row0 + unit / 4);
    }
    k = k_begin + (t % 4) * kChunkElements;
    cursor = loader.cursor(k);
  }
  // Queues this thread's chunks of the next k tile into `tile` (chunks at k_end and past: zeros), and
  // moves on to the tile after it.
  __device__ __forceinline__ void issue(std::uint32_t (*tile)[Rows::kStride], const Loader& loader, int t,
                                        int k_end) {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int unit = t + u * kThreads;
      if (active(unit))
        cp_async_chunk(&tile[unit / 4][Rows::chunk_word(unit / 4, unit % 4)],
                       k < k_end ? loader.chunk_source(fixed[u], cursor) : nullptr);
    }
    k += kTileK;
    loader.advance(cursor);
  }
};

// 16-byte chunks across the rows: 4 (tf32) or 8 (bf16) consecutive rows (m or n) at one k, for an
// operand whose rows are contiguous in memory (the weight gradient's, conv_chunk_loaders.cuh). The
// tile is held transposed, [k][rows + 8 elements] (so that the 8 rows a fragment read or an ldmatrix
// touches fall in distinct banks), and the fragments are read across it: with ldmatrix .trans for
// bf16 pairs, one word at a time for tf32. Lanes take consecutive chunks of a k row, copied with
// cp.async; a thread keeps its rows from tile to tile, and each of its chunks its own k. Loader
// concept:
//   kChunkedAcross = true;  Fixed fixed(int row0) const (row0: a chunk's first row);
//   Step step(int k) const (k decoded, once per block);  void advance(Step&) const (k += the
//   kernel's k tile, set on the host by for_k_tile);
//   const uint4* chunk_source(const Fixed&, const Step&) const (at k < K; nullptr: zeros).
template <Precision P, int kRows, int kThreads, class Loader>
struct OperandPipe<P, kRows, kThreads, Loader, OperandForm::kChunksAcross, PaddedRows> {
  static constexpr bool kBf16 = P == Precision::kBf16;
  static constexpr int kBK = kMmaTileWords * MmaFormat<P>::kPerWord;
  static constexpr int kChunkRows = kBf16 ? 8 : 4;
  static constexpr int kStrideWords = (kRows + 8) / (kBf16 ? 2 : 1);
  using Tile = std::uint32_t[kBK][kStrideWords];
  static constexpr int kChunksPerK = kRows / kChunkRows;
  static constexpr int kChunks = kBK * kChunksPerK;
  static constexpr int kUnits = (kChunks + kThreads - 1) / kThreads;
  static_assert(kThreads % kChunksPerK == 0, "a thread's chunk keeps its rows from tile to tile");
  static constexpr int kKPerUnit = kThreads / kChunksPerK;  // k rows from one of a thread's chunks to the next
  typename Loader::Fixed fixed;
  typename Loader::Step step[kUnits];  // each chunk's k, decoded
  int k;                               // the k of this thread's first chunk in the next tile to issue

  static __device__ __forceinline__ bool active(int unit) { return kChunks % kThreads == 0 || unit < kChunks; }
  __device__ __forceinline__ OperandPipe(const Loader& loader, int row0, int t, int k_begin) {
    fixed = loader.fixed(row0 + (t % kChunksPerK) * kChunkRows);
    k = k_begin + t / kChunksPerK;
#pragma unroll
    for (int u = 0; u < kUnits; ++u)
      if (active(t + u * kThreads)) step[u] = loader.step(k + u * kKPerUnit);
  }
  // Queues this thread's chunks of the next k tile into `tile` (k at k_end and past: zeros), and moves
  // on to the tile after it.
  __device__ __forceinline__ void issue(std::uint32_t (*tile)[kStrideWords], const Loader& loader, int t,
                                        int k_end) {
    const int word = (t % kChunksPerK) * 4;
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int unit = t + u * kThreads;
      if (active(unit)) {
        cp_async_chunk(&tile[unit / kChunksPerK][word],
                       k + u * kKPerUnit < k_end ? loader.chunk_source(fixed, step[u]) : nullptr);
        loader.advance(step[u]);
      }
    }
    k += kBK;
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
  // Two n tiles: b of the tile at c0 in f[0..1], of the tile at c0 + 8 in f[2..3]. bf16: one x4,
  // matrix j = lane / 8 at k 16s + (j & 1) * 8 + lane % 8, rows c0 + (j >> 1) * 8.
  static __device__ __forceinline__ void b_pair(const std::uint32_t (*tile)[kStrideWords], int s, int c0, int lane,
                                                std::uint32_t (&f)[4]) {
    if constexpr (kBf16) {
      const int j = lane >> 3;
      ldmatrix_x4_trans(f, address(tile, 16 * s + (j & 1) * 8 + (lane & 7), c0 + (j >> 1) * 8));
    } else {
      std::uint32_t lo[2], hi[2];
      b(tile, s, c0, lane, lo);
      b(tile, s, c0 + 8, lane, hi);
      f[0] = lo[0], f[1] = lo[1], f[2] = hi[0], f[3] = hi[1];
    }
  }
};

}  // namespace cnn::cuda
