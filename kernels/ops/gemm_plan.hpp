// The launch of one implicit matrix product (implicit_gemm.cuh): its precision, tile, and split-K.
// A function of the shape, the precision and the GPU's multiprocessor count only (plan_gemm,
// gemm_plan.cu), so the order of every sum is fixed and a rerun repeats bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cnn/choices.hpp"
#include "cuda/launch.hpp"

namespace cnn::cuda {

// fp32 (CUDA cores): the k depth of a tile, and the outputs per thread (4x4). Deeper tiles put more
// loads in flight per barrier, at the price of registers: 16 was slower than 8 at every cifar batch
// (docs/PERFORMANCE.md, the GEMM sweep; the build-time switch CNN_GEMM_BK that compared them is
// retired since, issue 23).
constexpr int kGemmBK = 8;
constexpr int kGemmThreadTile = 4;
// tf32 and bf16 (tensor cores, mma_gemm.cuh): 8 warps per block for most tiles (4 for some, kMmaTiles),
// and a k tile of 16 shared-memory words per row: 16 tf32 or 32 bf16 elements.
constexpr int kMmaThreads = 256;
constexpr int kMmaTileWords = 16;

// The tensor-core tiles plan_gemm may pick, in its order of preference, with their warp layouts
// (warps_m x warps_n warps, each owning a bm/warps_m x bn/warps_n piece of the tile). launch_mma_tile
// (mma_gemm.cuh) walks this list. The order is
// measured, not the fp32 kernel's fewest-loads-first: each product of the cifar preset's conv2 and
// conv3 timed alone with every tile (tests/gpu_precision.cpp, measure_layer_products; nvidia-h100-x1,
// 2026-11-26, docs/PERFORMANCE.md) ran fastest with 64x128 or 64x64, never 128x128, whose 160-odd
// registers leave one block per multiprocessor (conv2's bf16 forward at batch 2048: 64x64 419 us,
// 128x64 454, 128x128 851; its weight gradient: 64x128 531 us, 64x64 579, 128x128 1031).
// The last five give each warp a larger piece in 4 warps (64x32 or 32x64 of 16x8 mma tiles: more mma
// per fragment load than the 8-warp tiles' 32x16 and 32x32) at the same shared memory per block; they
// come last, so that plan_gemm takes none of them: measured (tests/gpu_precision.cpp,
// measure_layer_products, times every tile), only 64x64/2x2 pays, on long weight gradients, where
// plan_weight_gradient takes it.
struct MmaTile {
  int bm, bn, warps_m, warps_n;
  constexpr int threads() const { return 32 * warps_m * warps_n; }
  // Blocks per multiprocessor that the chunk kernel's registers must allow (__launch_bounds__; the
  // element kernel asks for none: its loads in flight live in registers, and 128 spilled): 0, none
  // asked, of the 8-warp tiles (ptxas's choice, 72-128 registers; asking for 1 took 20-30 more); 4 of
  // the 4-warp tiles (16 warps: at most 128 registers, where they took 122-158 unbounded), but 3 for
  // 256 rows, whose 8 chunks of A per thread spilled 104 bytes at 128 (163-168 registers, no spill).
  constexpr int min_blocks() const { return threads() == 256 ? 0 : bm >= 256 ? 3 : 4; }
  // A tile plan_pool_windows may pick: 8 warps, each over whole 32 rows (8 pool windows of 2x2 in the
  // store's order, mma_gemm.cuh).
  constexpr bool holds_pool_windows() const { return threads() == kMmaThreads && (bm / warps_m) % 32 == 0; }
};
inline constexpr MmaTile kMmaTiles[] = {
    {64, 128, 2, 4}, {64, 64, 2, 4}, {128, 64, 4, 2}, {128, 32, 4, 2},  {64, 32, 4, 2},  {32, 64, 2, 4},
    {32, 32, 2, 4},  {128, 128, 2, 4}, {128, 64, 2, 2}, {64, 128, 1, 4}, {64, 128, 2, 2}, {256, 32, 4, 1},
    {64, 64, 2, 2}};

// The warpgroup tiles (wgmma, sm_90a; wgmma_gemm.cuh, wgmma_tma_conv.cuh): BM / 64 warpgroups of 4
// warps, each over 64 rows and all BN columns (BN = 32, 64 or 128, the instruction's N).
// launch_wgmma_tile walks this list. Tiles of 64 rows (one warpgroup) were measured too (the cifar
// preset at batch 512 and 2048, docs/PERFORMANCE.md, the eleventh part): they won a few of conv3's
// small products by at most 8% (its bf16 input gradient at 512: 64x32 18.0 us, 128x64 19.6) and lost
// conv2's by 12-29% (its tf32 input gradient at 2048: 64x32 302 us, 128x32 267), so they are not built.
struct WgmmaTile {
  int bm, bn;
  constexpr int threads() const { return 2 * bm; }
};
inline constexpr WgmmaTile kWgmmaTiles[] = {{128, 32}, {128, 64}, {128, 128}};

// Up to this many splits, the sum kernel adds a product's splits one after another from split 0 (a
// thread per output; beyond, in 32 interleaved partial sums): a reader that adds them in that order
// itself gets the same bits (SplitPartials, layer_ops.hpp).
inline constexpr int kMaxSplitsAddedInOrder = 16;

// A launch of the product: precision, tile config, split-K, and the order-fixing numbers.
struct GemmPlan {
  Precision precision = Precision::kFp32;
  int bm = 64, bn = 64;
  int warps_m = 2, warps_n = 4;  // tensor cores: the tile's warp layout (kMmaTiles)
  bool wgmma = false;            // a warpgroup tile (kWgmmaTiles) in place of mma.sync's
  // A warpgroup product over TMA boxes of pixels (wgmma_tma_conv.cuh; tma()): each block's box of
  // box_w x box_h x box_s pixels (at most bm rows), and the boxes that cover the plane.
  int box_w = 0, box_h = 0, box_s = 0;
  int boxes = 0;
  int splits = 1;
  int k_per_split = 0;  // a multiple of k_tile()
  int m = 0, n = 0, k = 0;
  bool tensor_cores() const { return precision != Precision::kFp32; }
  bool tma() const { return boxes > 0; }
  int threads() const {
    if (wgmma) return WgmmaTile{bm, bn}.threads();
    return tensor_cores() ? 32 * warps_m * warps_n : bm * bn / (kGemmThreadTile * kGemmThreadTile);
  }
  // Elements of k per tile.
  int k_tile() const {
    return precision == Precision::kFp32 ? kGemmBK : precision == Precision::kTf32 ? kMmaTileWords : 2 * kMmaTileWords;
  }
  dim3 grid() const {
    return dim3(static_cast<unsigned>(tma() ? boxes : ceil_div(m, bm)), static_cast<unsigned>(ceil_div(n, bn)),
                static_cast<unsigned>(splits));
  }
  std::int64_t workspace_floats() const { return splits > 1 ? std::int64_t{splits} * m * n : 0; }
  // "mma.bf16 128x64, 3 splits", "mma.bf16 128x64/2x2 warps", "wgmma.tf32 128x32", "wgmma.tf32
  // 128x32, TMA boxes of 15x8x1 pixels": the settings block's and the tests' name for the launch (the
  // warp layout named where it is not 8 warps).
  std::string describe() const;
};

// Picks the tile and the split count: the first tile of the precision's list (fp32: largest first,
// gemm_plan.cu; tf32 and bf16: kMmaTiles) that is at most half padding and, with at most 4096 splits
// of at least 4 k-tiles each, puts about 512 threads on every multiprocessor; otherwise whichever
// comes closest (ties to the earlier tile). The three numbers are constants in gemm_plan.cu.
GemmPlan plan_gemm(int m, int n, int k, int multiprocessors, bool allow_split,
                   Precision precision = Precision::kFp32);
// A convolution's weight gradient (m = filters, n = taps, k = output positions: a long k split many
// ways): in tf32 and bf16, 64x64 in 2x2 warps where each of its splits still gets at least 16 k tiles,
// else plan_gemm. Each product timed alone with every tile (nvidia-h100-x1, 2026-11-27,
// docs/PERFORMANCE.md): it beat the planned 8-warp tile on conv2 and conv3 at batch 512 and 2048 by
// 5-21% wherever its splits kept 20 or more k tiles, and lost by 50% on conv3 at batch 512 in bf16
// (5 k tiles a split: the copy pipeline never fills and the split sum dominates).
GemmPlan plan_weight_gradient(int m, int n, int k, int multiprocessors, Precision precision);
// The products of a staged convolution whose operands both come as chunks along k, where the GPU runs
// the warpgroup product (`wgmma`, wgmma_available) and m is over 64 rows: 128 rows (two warpgroups) by
// the narrowest of kWgmmaTiles' widths that covers n, k split as plan_gemm splits it; else plan_gemm.
// The forward (m = positions, n = filters, k = taps x channels) takes it only unsplit. Each product
// timed alone with every tile (nvidia-h100-x1, 2026-11-27, docs/PERFORMANCE.md): on the input gradient
// (m = pixels, n = channels, k = taps x filters) it beat mma.sync's planned tile on the cifar preset's
// conv2 and conv3 by 1-15% at batch 128 to 2048 but for conv3 in bf16 at batch 512 (4% slower); on the
// forward it beat it by 10-22% unsplit (conv2 at 512 and 2048) and lost by up to 38% where it split k.
GemmPlan plan_staged_forward(int m, int n, int k, int multiprocessors, Precision precision, bool wgmma);
GemmPlan plan_input_gradient(int m, int n, int k, int multiprocessors, Precision precision, bool wgmma);
// The TMA form of a stride-1 convolution's input gradient (wgmma_tma_conv.cuh) over a plane of
// `samples` x height x width pixels, n channels, k = taps x filters words-per-tap: boxes of the whole
// width (at most 128) by as many rows, and (whole planes) samples, as 128 rows hold; 128 x the
// narrowest instruction N that covers n; k unsplit.
GemmPlan plan_pixel_boxes(int samples, int height, int width, int n, int k, Precision precision);
// A convolution's forward with its 2x2 max-pool in the store (conv_tensor_core.cu): the rows are
// pool windows in fours, 32 rows per 8 windows (m = 32 * ceil(windows / 8)), k is not split (the
// store pools final sums), and the tile is one that holds_pool_windows; among those, as plan_gemm.
// Where the GPU runs the warpgroup product (`wgmma`), its tile (128 x the narrowest N that covers n,
// 16 rows per 4 windows: m = 16 * ceil(windows / 4)) where it fills the GPU as well as mma.sync's
// tile, as plan_staged_forward takes it unsplit.
GemmPlan plan_pool_windows(int windows, int n, int k, int multiprocessors, Precision precision, bool wgmma = false);
// The row order of a pool-window plan (PoolOrderedWindowA::window_bits): log2 of the windows in one
// warp's rows, 8 in mma.sync's 32, 4 in a warpgroup's 16.
inline int pool_window_bits(const GemmPlan& plan) { return plan.wgmma ? 2 : 3; }
// The same for one given tile (one of the precision's): what plan_gemm weighs for each, and what the
// tile sweeps of tests/gpu_precision.cpp time. By bm x bn: tf32 and bf16 take the first kMmaTiles
// entry of that size (8 warps).
GemmPlan plan_gemm_tile(int m, int n, int k, int multiprocessors, bool allow_split, Precision precision, int bm,
                        int bn);
GemmPlan plan_gemm_tile(int m, int n, int k, int multiprocessors, bool allow_split, Precision precision,
                        const MmaTile& tile);
GemmPlan plan_gemm_tile(int m, int n, int k, int multiprocessors, bool allow_split, Precision precision,
                        const WgmmaTile& tile);

}  // namespace cnn::cuda
