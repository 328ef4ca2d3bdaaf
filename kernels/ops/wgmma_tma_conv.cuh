// The warpgroup product of a stride-1 convolution's input gradient with both operands copied by the
// TMA unit (sm_90a): where the chunk forms (wgmma_gemm.cuh, mma_gemm.cuh) spend most of their
// instructions on each 16-byte chunk's address and bounds, here one thread asks for each k tile with
// two instructions, and the rest only multiply.
//
// A block's 128 rows are a box of box_w x box_h x box_s pixels of the input plane [n, H, W] (rows in
// that order, x fastest; rows past the box, and pixels past the plane, are computed and never
// stored), by BN columns (channels). For k tile (i, j, f0) of k = (i, j, f) (16 words of f each), A is
// the same box of the staged output gradient [n, OH, OW, Fp words], moved by the tap: the output
// position (h + pad - i, w + pad - j) of each pixel, zeros outside the tensor, which the TMA fills;
// B is the staged weights' [C][KK*Fp] box of 16 words by BN rows. Both arrive in the 64-byte swizzle
// that the wgmma descriptors name, so the tensor cores read them as the chunk form's Swizzled64Rows.
// The k tiles and their two k steps run in the chunk form's order with the same instruction, so the
// bits are those of the chunk form's warpgroup tiles with k unsplit (tests/gpu_mma_tiles.cpp).
//
// The pipeline: kStages stages, each with an mbarrier that the k tile's copies complete. At tile t
// every thread waits for its barrier, the warpgroups issue its wgmma and wait until only they are in
// flight (tile t - 1's are done), the block meets at a barrier, and thread 0 queues tile
// t + kStages - 1 into the stage that tile t - 1 has just left.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cnn/choices.hpp"
#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/tensor_map.hpp"
#include "ops/gemm_plan.hpp"
#include "ops/mma_gemm.cuh"
#include "ops/wgmma_instructions.cuh"

namespace cnn::cuda {

// The input plane's tiling into pixel boxes (GemmPlan's box_*), and the walk over k.
struct PixelBoxes {
  int width, height, samples;  // the plane of rows: W, H, n
  int box_w, box_h, box_s;     // a block's box (box_w * box_h * box_s <= 128)
  int boxes_x, boxes_y;        // boxes per sample along x and y
  int ks, pad;                 // the kernel's size and padding (the tap's shift: pad - i, pad - j)
  int tiles_per_tap;           // k tiles of 16 words per tap (the staged channels' words / 16)
};

// Stages of the TMA form: as many k tiles as 72 KiB holds, at most 8 (3 blocks per multiprocessor;
// 7 stages at BN 32, 6 at 64).
template <int BN>
struct TmaStages {
  static constexpr int kABytes = 128 * 64;  // 128 rows of 16 words
  static constexpr int kBBytes = (BN * 64 + 1023) / 1024 * 1024;  // each stage on a 1024-byte boundary
  static constexpr int kFit = 72 * 1024 / (kABytes + kBBytes);
  static constexpr int value = kFit > 8 ? 8 : kFit;
  static constexpr int kBytes = value * (kABytes + kBBytes) + 1024;  // + room to align
};

template <Precision P, int BN, class Store>
__global__ void __launch_bounds__(256)
    wgmma_tma_dgrad_kernel(const __grid_constant__ CUtensorMap grad_map, const __grid_constant__ CUtensorMap weight_map,
                           PixelBoxes boxes, Store store, int N) {
  start_after_previous_kernel();
#if CNN_HAVE_WGMMA
  using Stages = TmaStages<BN>;
  constexpr int kStages = Stages::value;
  constexpr unsigned kStepBytes = 32;  // a k step: 16 bf16 or 8 tf32 of a 64-byte row
  extern __shared__ unsigned char shared_bytes[];
  __shared__ std::uint64_t full[kStages];
  unsigned char* aligned = shared_bytes + ((1024 - shared_address(shared_bytes) % 1024) % 1024);
  unsigned char* a_stages = aligned;
  unsigned char* b_stages = aligned + kStages * Stages::kABytes;

  const int t = threadIdx.x;
  // This block's box: (x0, y0) of samples s0.. .
  int box = blockIdx.x;
  const int bx = box % boxes.boxes_x;
  box /= boxes.boxes_x;
  const int by = box % boxes.boxes_y;
  const int x0 = bx * boxes.box_w, y0 = by * boxes.box_h, s0 = (box / boxes.boxes_y) * boxes.box_s;
  const int n0 = blockIdx.y * BN;
  const int tiles = boxes.ks * boxes.ks * boxes.tiles_per_tap;
  const unsigned box_rows = boxes.box_w * boxes.box_h * boxes.box_s;
  const unsigned stage_bytes = box_rows * 64 + BN * 64;

  auto issue = [&](int tile) {  // thread 0 only
    const int stage = tile % kStages;
    const int tap = tile / boxes.tiles_per_tap;
    const int f0 = (tile - tap * boxes.tiles_per_tap) * 16;
    const int i = tap / boxes.ks, j = tap - (tap / boxes.ks) * boxes.ks;
    mbarrier_arrive_expect_bytes(&full[stage], stage_bytes);
    tma_load_4d(a_stages + stage * Stages::kABytes, &grad_map, f0, x0 + boxes.pad - j, y0 + boxes.pad - i, s0,
                &full[stage]);
    tma_load_2d(b_stages + stage * Stages::kBBytes, &weight_map, tile * 16, n0, &full[stage]);
  };
  if (t == 0) {
    for (int s = 0; s < kStages; ++s) mbarrier_init(&full[s], 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (t == 0)
    for (int tile = 0; tile < kStages - 1 && tile < tiles; ++tile) issue(tile);

  float acc[BN / 2];
#pragma unroll
  for (int e = 0; e < BN / 2; ++e) acc[e] = 0.0f;
  const unsigned a_row_offset = 64 * 64 * (t / 128);  // this warpgroup's 64 rows
  for (int tile = 0; tile < tiles; ++tile) {
    const int stage = tile % kStages;
    mbarrier_wait(&full[stage], (tile / kStages) & 1);
    const std::uint64_t da = wgmma_descriptor(shared_address(a_stages + stage * Stages::kABytes) + a_row_offset);
    const std::uint64_t db = wgmma_descriptor(shared_address(b_stages + stage * Stages::kBBytes));
    wgmma_fence();
    wgmma_async<P, BN>(acc, da, db);
    wgmma_async<P, BN>(acc, wgmma_advance(da, kStepBytes), wgmma_advance(db, kStepBytes));
    wgmma_commit();
    wgmma_wait<1>();
    __syncthreads();  // every warpgroup is done with tile - 1's stage
    if (t == 0 && tile + kStages - 1 < tiles) issue(tile + kStages - 1);
  }
  wgmma_wait<0>();
  wgmma_fence_operands(acc);

  // Thread t holds rows 16 * warp + group (+ 8) of the box, columns 8j + 2 * quad (+ 1).
  const int warp = t >> 5, group = (t & 31) >> 2, quad = t & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = 16 * warp + group + 8 * half;
    if (row >= static_cast<int>(box_rows)) continue;
    const int plane_rows = boxes.box_w * boxes.box_h;
    const int ds = row / plane_rows, in_plane = row - ds * plane_rows;
    const int dy = in_plane / boxes.box_w, dx = in_plane - dy * boxes.box_w;
    const int s = s0 + ds, y = y0 + dy, x = x0 + dx;
    if (s >= boxes.samples || y >= boxes.height || x >= boxes.width) continue;
    const int m = (s * boxes.height + y) * boxes.width + x;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int odd = 0; odd < 2; ++odd) {
        const int n = n0 + 8 * j + 2 * quad + odd;
        if (n < N) store(m, n, acc[4 * j + 2 * half + odd]);
      }
  }
#else
  (void)boxes, (void)store, (void)N;
  __trap();
#endif
}

// Where a TMA input gradient reads: the staged output gradient [n, OH, OW, Fp] and the staged weights
// [C][KK*Fp], in 32-bit words.
struct TmaDgradOperands {
  const std::uint32_t* grad_out;
  const std::uint32_t* weight;
  int samples, height, width, channels;  // the input plane and C (the product's n)
  int out_h, out_w, fp_words;            // the staged output gradient
  int ks, pad;
};

// Queues the input gradient of plan (plan.tma()) with the store.
template <Precision P, class Store>
void launch_tma_dgrad(const GemmPlan& plan, const TmaDgradOperands& op, const Store& store, cudaStream_t stream) {
  const CUtensorMap grad_map = encode_words_map(
      op.grad_out, {static_cast<std::uint64_t>(op.fp_words), static_cast<std::uint64_t>(op.out_w),
                    static_cast<std::uint64_t>(op.out_h), static_cast<std::uint64_t>(op.samples)},
      {16, static_cast<unsigned>(plan.box_w), static_cast<unsigned>(plan.box_h), static_cast<unsigned>(plan.box_s)});
  const int k_words = op.ks * op.ks * op.fp_words;
  const PixelBoxes boxes{op.width,
                         op.height,
                         op.samples,
                         plan.box_w,
                         plan.box_h,
                         plan.box_s,
                         static_cast<int>(ceil_div(op.width, plan.box_w)),
                         static_cast<int>(ceil_div(op.height, plan.box_h)),
                         op.ks,
                         op.pad,
                         op.fp_words / 16};
  const dim3 grid = plan.grid();
  auto launch = [&](auto kernel, int bn, int bytes) {
    const CUtensorMap weight_map = encode_words_map(
        op.weight, {static_cast<std::uint64_t>(k_words), static_cast<std::uint64_t>(op.channels)},
        {16, static_cast<unsigned>(bn)});
    // Over 48 KiB of dynamic shared memory needs the kernel's leave (a host call, no stream work).
    CNN_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    launch_dependent(kernel, grid, 256, bytes, stream, grad_map, weight_map, boxes, store, op.channels);
  };
  switch (plan.bn) {
    case 32: launch(wgmma_tma_dgrad_kernel<P, 32, Store>, 32, TmaStages<32>::kBytes); break;
    case 64: launch(wgmma_tma_dgrad_kernel<P, 64, Store>, 64, TmaStages<64>::kBytes); break;
    case 128: launch(wgmma_tma_dgrad_kernel<P, 128, Store>, 128, TmaStages<128>::kBytes); break;
    default: throw Error(ExitCode::kFailure, "internal error: no TMA input-gradient tile " + plan.describe());
  }
  CNN_CHECK_LAUNCH();
}

}  // namespace cnn::cuda
