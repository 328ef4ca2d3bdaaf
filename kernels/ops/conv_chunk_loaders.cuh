// The chunk loaders of the convolution's tensor-core forms (conv_tensor_core.cu): what the cp.async
// pipes of mma_gemm.cuh (mma_operand_pipes.cuh) read from the staged NHWC tensors.
//
//   forward      A = StagedWindowA       [m = (s,oy,ox)][k = (i,j,c)]   chunks along k
//                  or PoolOrderedWindowA [m = (window, dy, dx)]           (the max-pool in the store)
//                B = StagedRowsB         the staged weights [F][KK*Cp]
//   input grad   A = StagedGradA         [m = (s,h,w)][k = (i,j,f)]     chunks along k
//                B = StagedRowsB         the staged weights [C][KK*Fp]
//   weight grad  A = StagedGradAcross    [m = f][k = p]                 chunks across m
//                B = StagedWindowAcross  [k = p][n = (i,j,c)] + bias    chunks across n
//
// A pipe decodes each of its chunks' k once per block (cursor, step) and then moves it on by one k
// tile per tile by adding with carries (advance): k = (i*KS + j)*Cp + c for the taps, k = p = (s*OH +
// oy)*OW + ox for the positions. The k-tile's own decomposition is made once on the host
// (for_k_tile, called by launch_mma_tile with the kernel's k tile). Each remainder stays below its
// divisor after one carry, since the step's own remainder is below it too. The pipe tests k < k_end
// (<= K) before it asks for a chunk, so the loaders test only the rows, the padding and the image edge.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/conv_products.cuh"
#include "ops/fast_div.cuh"

namespace cnn::cuda {
// Internal to the file that includes it (as conv_products.cuh).
namespace {

// The output position (s, oy, ox) of flat index m of [n, OH, OW], as the sample's offset into a
// staged [n, H, W, Cp] tensor and the window's top-left input pixel (may lie in the padding).
struct WindowOrigin {
  std::int64_t sample;  // s*H*W*Cp
  int y0, x0;           // oy*stride - pad, ox*stride - pad
};
__device__ __forceinline__ WindowOrigin window_origin(int m, const FastDiv& by_ohw, const FastDiv& by_ow, int H, int W,
                                                      int Cp, int stride, int pad) {
  const int s = by_ohw.div(m);
  const int r = m - s * static_cast<int>(by_ohw.divisor);
  const int oy = by_ow.div(r);
  const int ox = r - oy * static_cast<int>(by_ow.divisor);
  return {static_cast<std::int64_t>(s) * H * W * Cp, oy * stride - pad, ox * stride - pad};
}

// A tap (i, j) and channel c of a chunk's first k = (i*KS + j)*channels + c.
struct ChunkTap {
  int i, j, c;
};
__host__ __device__ __forceinline__ ChunkTap split_tap(int k, int channels, int ks) {
  const int tap = k / channels;
  return {tap / ks, tap % ks, k % channels};
}
__device__ __forceinline__ ChunkTap decode_chunk(int k, const FastDiv& by_channels, const FastDiv& by_ks) {
  const int tap = by_channels.div(k);
  const int i = by_ks.div(tap);
  return {i, tap - i * static_cast<int>(by_ks.divisor), k - tap * static_cast<int>(by_channels.divisor)};
}

// k = (i, j, c) of the along-k loaders, moved on by one k tile `step` (the tile's own (i, j, c), at
// most (any, KS - 1, channels - 1)): c, then j, carry at most once each.
__device__ __forceinline__ void advance_tap(ChunkTap& k, const ChunkTap& step, int channels, int ks) {
  k.c += step.c;
  if (k.c >= channels) {
    k.c -= channels;
    ++k.j;
  }
  k.j += step.j;
  if (k.j >= ks) {
    k.j -= ks;
    ++k.i;
  }
  k.i += step.i;
}

// The chunk at word `word` of a staged tensor of 32-bit words.
__device__ __forceinline__ const uint4* chunk_at(const std::uint32_t* words, std::int64_t word) {
  return reinterpret_cast<const uint4*>(words + word);
}

// The weight gradient's bias chunk, (1, 0, ...) in tf32 and in bf16 (1 in the low half): a column of
// ones in global memory, where cp.async can copy it from.
__device__ const uint4 kBiasChunks[2] = {{0x3F800000u, 0, 0, 0}, {0x3F80u, 0, 0, 0}};

// Forward A[m = (s,oy,ox), k = (i,j,c)] over the staged input [n,H,W,Cp]: the chunk at pixel (y0 + i,
// x0 + j), word base + ((i*W + j)*Cp + c) / per word.
struct StagedWindowA {
  static constexpr bool kChunked = true;
  const std::uint32_t* in;
  int word_shift;  // log2 of elements per word
  int H, W, Cp, stride, pad, positions;
  FastDiv by_ohw, by_ow, by_cp, by_ks;
  ChunkTap tile_step{};  // the k tile, (i, j, c) (for_k_tile)
  struct Fixed {
    std::int64_t base;  // the word of channel 0 at pixel (y0, x0) of the sample (0: no position)
    int y0, x0;         // the window's top-left pixel (kFar: no position)
  };
  struct Cursor {
    ChunkTap k;
    int offset;  // words from a window's base to the chunk of k
  };
  StagedWindowA for_k_tile(int k_tile) const {
    StagedWindowA loader = *this;
    loader.tile_step = split_tap(k_tile, Cp, static_cast<int>(by_ks.divisor));
    return loader;
  }
  __device__ __forceinline__ Fixed fixed(int m) const {
    if (m >= positions) return {0, kFar, kFar};
    const WindowOrigin o = window_origin(m, by_ohw, by_ow, H, W, Cp, stride, pad);
    return {(o.sample + (static_cast<std::int64_t>(o.y0) * W + o.x0) * Cp) >> word_shift, o.y0, o.x0};
  }
  __device__ __forceinline__ int offset(const ChunkTap& k) const { return ((k.i * W + k.j) * Cp + k.c) >> word_shift; }
  __device__ __forceinline__ Cursor cursor(int k) const {
    const ChunkTap tap = decode_chunk(k, by_cp, by_ks);
    return {tap, offset(tap)};
  }
  __device__ __forceinline__ void advance(Cursor& cursor) const {
    advance_tap(cursor.k, tile_step, Cp, static_cast<int>(by_ks.divisor));
    cursor.offset = offset(cursor.k);
  }
  __device__ __forceinline__ const uint4* chunk_source(const Fixed& p, const Cursor& cursor) const {
    const int y = p.y0 + cursor.k.i;
    const int x = p.x0 + cursor.k.j;
    if (static_cast<unsigned>(y) >= static_cast<unsigned>(H) || static_cast<unsigned>(x) >= static_cast<unsigned>(W))
      return nullptr;
    return chunk_at(in, p.base + cursor.offset);
  }
};

// StagedWindowA with its rows in 2x2 pool-window order, for a forward that pools in its store
// (MmaWarpTile::store_windows), in groups of 4 * 2^window_bits rows: row m is element (dy, dx) =
// ((m >> (b + 1)) & 1, (m >> b) & 1) of window (m >> (b + 2)) * 2^b + (m & (2^b - 1)), b = window_bits,
// and window (s, py, px) of [n, PH, PW] is the outputs (2py + dy, 2px + dx). mma.sync's warps take 32
// rows, 8 windows (b = 3); a warpgroup's warps 16 rows, 4 windows (b = 2; pool_window_bits). The conv
// outputs that no window covers (an odd last row or column) are never computed.
struct PoolOrderedWindowA : StagedWindowA {
  int windows;          // n * PH * PW
  FastDiv by_phw, by_pw;
  int window_bits;
  PoolOrderedWindowA for_k_tile(int k_tile) const {
    PoolOrderedWindowA loader = *this;
    loader.tile_step = split_tap(k_tile, Cp, static_cast<int>(by_ks.divisor));
    return loader;
  }
  __device__ __forceinline__ Fixed fixed(int m) const {
    const int b = window_bits;
    const int window = ((m >> (b + 2)) << b) + (m & ((1 << b) - 1));
    if (window >= windows) return {0, kFar, kFar};
    const int s = by_phw.div(window);
    const int r = window - s * static_cast<int>(by_phw.divisor);
    const int py = by_pw.div(r);
    const int px = r - py * static_cast<int>(by_pw.divisor);
    const int y0 = (2 * py + ((m >> (b + 1)) & 1)) * stride - pad;
    const int x0 = (2 * px + ((m >> b) & 1)) * stride - pad;
    const std::int64_t sample = static_cast<std::int64_t>(s) * H * W * Cp;
    return {(sample + (static_cast<std::int64_t>(y0) * W + x0) * Cp) >> word_shift, y0, x0};
  }
};

// Input-gradient A[m = (s,h,w), k = (i,j,f)] over the staged output gradient [n,OH,OW,Fp]: the
// output position (oy, ox) = ((h+pad-i)/S, (w+pad-j)/S) whose window puts tap (i,j) on pixel (h,w),
// when there is a whole one. At stride 1 the chunk is at word base + (f - (i*OW + j)*Fp) / per word.
struct StagedGradA {
  static constexpr bool kChunked = true;
  const std::uint32_t* grad_out;
  int word_shift;
  int OH, OW, Fp, stride, pixels;
  int pad;
  FastDiv by_hw, by_w, by_fp, by_ks;
  ChunkTap tile_step{};
  struct Fixed {
    std::int64_t base;  // stride 1: the word of f = 0 at (s, yp, xp); otherwise at (s, 0, 0)
    int yp, xp;         // h + pad, w + pad (-kFar: none)
  };
  struct Cursor {
    ChunkTap k;
    int offset;  // stride 1: (f - (i*OW + j)*Fp) / per word; otherwise f / per word
  };
  StagedGradA for_k_tile(int k_tile) const {
    StagedGradA loader = *this;
    loader.tile_step = split_tap(k_tile, Fp, static_cast<int>(by_ks.divisor));
    return loader;
  }
  __device__ __forceinline__ Fixed fixed(int m) const {
    if (m >= pixels) return {0, -kFar, -kFar};
    const int s = by_hw.div(m);
    const int r = m - s * static_cast<int>(by_hw.divisor);
    const int h = by_w.div(r);
    const int yp = h + pad, xp = r - h * static_cast<int>(by_w.divisor) + pad;
    std::int64_t base = static_cast<std::int64_t>(s) * OH * OW * Fp;
    if (stride == 1) base += (static_cast<std::int64_t>(yp) * OW + xp) * Fp;
    return {base >> word_shift, yp, xp};
  }
  __device__ __forceinline__ int offset(const ChunkTap& k) const {
    return (stride == 1 ? k.c - (k.i * OW + k.j) * Fp : k.c) >> word_shift;
  }
  __device__ __forceinline__ Cursor cursor(int k) const {
    const ChunkTap tap = decode_chunk(k, by_fp, by_ks);
    return {tap, offset(tap)};
  }
  __device__ __forceinline__ void advance(Cursor& cursor) const {
    advance_tap(cursor.k, tile_step, Fp, static_cast<int>(by_ks.divisor));
    cursor.offset = offset(cursor.k);
  }
  __device__ __forceinline__ const uint4* chunk_source(const Fixed& p, const Cursor& cursor) const {
    int oy = p.yp - cursor.k.i;
    int ox = p.xp - cursor.k.j;
    if (stride == 1) {
      if (static_cast<unsigned>(oy) >= static_cast<unsigned>(OH) ||
          static_cast<unsigned>(ox) >= static_cast<unsigned>(OW))
        return nullptr;
      return chunk_at(grad_out, p.base + cursor.offset);
    }
    if (oy < 0 || ox < 0 || oy % stride != 0 || ox % stride != 0) return nullptr;
    oy /= stride;
    ox /= stride;
    if (oy >= OH || ox >= OW) return nullptr;
    const std::int64_t position = (static_cast<std::int64_t>(oy) * OW + ox) * Fp;
    return chunk_at(grad_out, p.base + (position >> word_shift) + cursor.offset);
  }
};

// B[k, n] = staged weight row n, [rows][K] (the forward's filters, or the input gradient's channels).
struct StagedRowsB {
  static constexpr bool kChunked = true;
  const std::uint32_t* weight;
  int word_shift;
  int rows, K;
  int tile_words = 0;  // the k tile in words (for_k_tile)
  using Fixed = int;   // row n's first word, or -1
  using Cursor = int;  // k in words
  StagedRowsB for_k_tile(int k_tile) const {
    StagedRowsB loader = *this;
    loader.tile_words = k_tile >> word_shift;
    return loader;
  }
  __device__ __forceinline__ Fixed fixed(int n) const { return n < rows ? (n * K) >> word_shift : -1; }
  __device__ __forceinline__ Cursor cursor(int k) const { return k >> word_shift; }
  __device__ __forceinline__ void advance(Cursor& k) const { k += tile_words; }
  __device__ __forceinline__ const uint4* chunk_source(Fixed row, Cursor k) const {
    return row >= 0 ? chunk_at(weight, std::int64_t{row} + k) : nullptr;
  }
};

// Weight-gradient A[m = f, k = p]: the staged output gradient [n*OH*OW][Fp], chunks of f.
struct StagedGradAcross {
  static constexpr bool kChunkedAcross = true;
  const std::uint32_t* grad_out;
  int word_shift;
  int Fp;
  std::int64_t tile_words = 0;  // the k tile's positions in words (for_k_tile)
  using Fixed = int;            // the chunk's first filter f0 in words (-1: none, f0 >= Fp)
  using Step = std::int64_t;    // p*Fp in words
  StagedGradAcross for_k_tile(int k_tile) const {
    StagedGradAcross loader = *this;
    loader.tile_words = (std::int64_t{k_tile} * Fp) >> word_shift;
    return loader;
  }
  __device__ __forceinline__ Fixed fixed(int f0) const { return f0 < Fp ? f0 >> word_shift : -1; }
  __device__ __forceinline__ Step step(int p) const { return (std::int64_t{p} * Fp) >> word_shift; }
  __device__ __forceinline__ void advance(Step& p) const { p += tile_words; }
  __device__ __forceinline__ const uint4* chunk_source(Fixed f0, Step p) const {
    return f0 >= 0 ? chunk_at(grad_out, p + f0) : nullptr;
  }
};

// Weight-gradient B[k = p, n = (i,j,c)] over the staged input [n,H,W,Cp], chunks of c; the chunk at
// n = KK*Cp is (1, 0, ...) for the bias. A chunk's position p = (s, oy, ox) is kept decoded and moved
// on by the k tile's (ds, doy, dox): ox, then oy, carry at most once each.
struct StagedWindowAcross {
  static constexpr bool kChunkedAcross = true;
  const std::uint32_t* in;
  int word_shift;
  bool bf16;  // which of kBiasChunks
  int H, W, Cp, taps_cp, stride, pad, OH, OW;  // taps_cp = KK*Cp
  FastDiv by_ohw, by_ow, by_cp, by_ks;
  // The k tile's positions as (ds, doy, dox), and the words of a sample and of ds samples (for_k_tile).
  int tile_oy = 0, tile_ox = 0;
  std::int64_t sample_words = 0, tile_sample_words = 0;
  struct Fixed {
    int i, j;    // the chunk's tap
    int offset;  // (i*W + j)*Cp + c in words
    int kind;    // 0 data, 1 the bias chunk, 2 nothing
  };
  struct Step {
    std::int64_t sample;  // s*H*W*Cp in words
    int oy, ox;
  };
  StagedWindowAcross for_k_tile(int k_tile) const {
    StagedWindowAcross loader = *this;
    const int r = k_tile % (OH * OW);
    loader.tile_oy = r / OW;
    loader.tile_ox = r % OW;
    loader.sample_words = (std::int64_t{H} * W * Cp) >> word_shift;
    loader.tile_sample_words = k_tile / (OH * OW) * loader.sample_words;
    return loader;
  }
  __device__ __forceinline__ Fixed fixed(int n0) const {
    if (n0 >= taps_cp) return {0, 0, 0, n0 == taps_cp ? 1 : 2};
    const ChunkTap t = decode_chunk(n0, by_cp, by_ks);
    return {t.i, t.j, ((t.i * W + t.j) * Cp + t.c) >> word_shift, 0};
  }
  __device__ __forceinline__ Step step(int p) const {
    const int s = by_ohw.div(p);
    const int r = p - s * static_cast<int>(by_ohw.divisor);
    const int oy = by_ow.div(r);
    return {(static_cast<std::int64_t>(s) * H * W * Cp) >> word_shift, oy, r - oy * static_cast<int>(by_ow.divisor)};
  }
  __device__ __forceinline__ void advance(Step& p) const {
    p.ox += tile_ox;
    if (p.ox >= OW) {
      p.ox -= OW;
      ++p.oy;
    }
    p.oy += tile_oy;
    if (p.oy >= OH) {
      p.oy -= OH;
      p.sample += sample_words;
    }
    p.sample += tile_sample_words;
  }
  __device__ __forceinline__ const uint4* chunk_source(const Fixed& f, const Step& p) const {
    if (f.kind != 0) return f.kind == 1 ? &kBiasChunks[bf16 ? 1 : 0] : nullptr;
    const int y0 = p.oy * stride - pad, x0 = p.ox * stride - pad;
    const int y = y0 + f.i;
    const int x = x0 + f.j;
    if (static_cast<unsigned>(y) >= static_cast<unsigned>(H) || static_cast<unsigned>(x) >= static_cast<unsigned>(W))
      return nullptr;
    return chunk_at(in, p.sample + (((y0 * W + x0) * Cp) >> word_shift) + f.offset);
  }
};

}  // namespace
}  // namespace cnn::cuda
