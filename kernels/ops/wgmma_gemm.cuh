// The warpgroup form of the tensor-core product (sm_90a; mma_gemm.cuh is the mma.sync form), for
// the products whose operands both come as chunks along k (the staged conv forward and input
// gradient, conv_chunk_loaders.cuh). A block is BM / 64 warpgroups over a BM x BN tile; each
// warpgroup multiplies its 64 rows by all BN columns with wgmma, which reads both operands from
// shared memory through descriptors (wgmma_instructions.cuh): no ldmatrix, no fragment registers,
// two instructions per k tile and warpgroup, where mma.sync took 8-32 mma and 6-12 ldmatrix per warp.
// The copies are the chunk form's (cp.async by every thread; OperandPipe with Swizzled64Rows), so the
// loaders, their bounds tests and the split of k are mma_gemm_async_kernel's, and so are the stores:
// each warp's accumulators are mma.sync's m16n8 layout side by side (MmaWarpTile with 16 rows a warp
// and all BN columns).
//
// The order of every sum is fixed by the split of k and the instruction: k tiles in order, and in
// each its two k steps in order, each one wgmma. Which block holds an output does not enter it, so
// every tile of one split gives the same bits (tests/gpu_mma_tiles.cpp); they are not mma.sync's
// bits, as wgmma adds its k step in its own order.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <iterator>

#include "cnn/choices.hpp"
#include "cnn/errors.hpp"
#include "cuda/dependent_launch.cuh"
#include "ops/gemm_plan.hpp"
#include "ops/mma_gemm.cuh"
#include "ops/wgmma_instructions.cuh"

namespace cnn::cuda {

// Each operand's pipe in the warpgroup form: chunks along k into rows of 64 bytes in the 64-byte
// swizzle.
template <Precision P, int kRows, int kThreads, class Loader>
using WgmmaPipe = OperandPipe<P, kRows, kThreads, Loader, OperandForm::kChunksAlongK, Swizzled64Rows>;

// Stages of the warpgroup form: as many as 48 KiB of static shared memory holds, 3 or 4. Tile t's
// copies are queued kStages - 2 tiles ahead, so that the stage they overwrite held tile t - 2, whose
// wgmma every warpgroup has waited for (one group stays in flight while the next tile's copies go).
// Rows of 128 bytes (32-word k tiles, the 128-byte swizzle, 4 stages in dynamic shared memory) were
// measured too: conv2's input gradient 12-31% slower and its forward between 5% faster (tf32) and 17%
// slower (bf16), at 2 blocks per multiprocessor where these rows allow 4 or 5 (docs/PERFORMANCE.md).
template <class PipeA, class PipeB>
struct WgmmaStages {
  static constexpr int kBytes = static_cast<int>(sizeof(typename PipeA::Tile) + sizeof(typename PipeB::Tile));
  static constexpr int kFit = 48 * 1024 / kBytes;
  static constexpr int value = kFit > 4 ? 4 : kFit;
  static_assert(kFit >= 3, "a warpgroup tile needs 3 stages");
};

// At tile t the block waits for tile t's copies (and fences them for the async proxy), then queues
// tile t + kStages - 2 into the stage of tile t - 2, then issues tile t's two wgmma (k steps of 32
// bytes) and waits until only they are in flight. One copy group is committed per tile, empty at the
// end.
template <Precision P, int BM, int BN, class LoadA, class LoadB, class Store>
__global__ void __launch_bounds__(2 * BM)
    wgmma_gemm_kernel(LoadA load_a, LoadB load_b, Store store, int M, int N, int K, int k_per_split,
                      float* __restrict__ workspace /*[splits, N, M] when gridDim.z > 1*/) {
  start_after_previous_kernel();
#if CNN_HAVE_WGMMA
  constexpr int kThreads = 2 * BM;  // BM / 64 warpgroups
  using PipeA = WgmmaPipe<P, BM, kThreads, LoadA>;
  using PipeB = WgmmaPipe<P, BN, kThreads, LoadB>;
  constexpr int kStages = WgmmaStages<PipeA, PipeB>::value;
  constexpr int kAhead = kStages - 2;
  constexpr int BK = PipeA::kTileK;
  constexpr unsigned kStepBytes = 32;  // a k step: 16 bf16 or 8 tf32 of a 64-byte row
  // On the swizzle's 512-byte boundary (each tile is a multiple of 512 bytes).
  __shared__ __align__(1024) typename PipeA::Tile As[kStages];
  __shared__ __align__(1024) typename PipeB::Tile Bs[kStages];

  const int t = threadIdx.x;
  const BlockTile block(BM, BN, BK, K, k_per_split);
  const int m0 = block.m0, n0 = block.n0, k_end = block.k_end, tiles = block.tiles;

  PipeA a(load_a, m0, t, block.k_begin);
  PipeB b(load_b, n0, t, block.k_begin);
  auto issue = [&](int tile) { issue_chunk_tile<kStages>(tile, tiles, a, b, As, Bs, load_a, load_b, t, k_end); };
  // Warp w holds rows 16w..16w+15 of the tile (64 per warpgroup) and all BN columns.
  MmaWarpTile<P, BM, BN, BM / 16, 1, PipeA, PipeB> warp(t);
  float(&acc)[BN / 2] = reinterpret_cast<float(&)[BN / 2]>(warp.acc[0]);
  const int rows = 64 * (t / 128);  // this warpgroup's first row

#pragma unroll
  for (int tile = 0; tile < kAhead; ++tile) issue(tile);
  for (int tile = 0; tile < tiles; ++tile) {
    cp_async_wait<kAhead - 1>();
    fence_proxy_async_shared();
    __syncthreads();
    issue(tile + kAhead);
    const int stage = tile % kStages;
    const std::uint64_t da = wgmma_descriptor(shared_address(&As[stage][rows][0]));
    const std::uint64_t db = wgmma_descriptor(shared_address(&Bs[stage][0][0]));
    wgmma_fence();
    wgmma_async<P, BN>(acc, da, db);
    wgmma_async<P, BN>(acc, wgmma_advance(da, kStepBytes), wgmma_advance(db, kStepBytes));
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  wgmma_fence_operands(acc);
  cp_async_wait<0>();
  warp.store(store, m0, n0, M, N, workspace);
#else
  (void)load_a, (void)load_b, (void)store, (void)M, (void)N, (void)K, (void)k_per_split, (void)workspace;
  __trap();
#endif
}

// Queues the product's main kernel for plan's warpgroup tile, one of kWgmmaTiles (gemm_plan.hpp),
// walking the list at compile time from entry I (launch_chunk_tile sends plans with plan.wgmma here).
template <Precision P, std::size_t I = 0, class LoadA, class LoadB, class Store>
void launch_wgmma_tile(const GemmPlan& plan, const LoadA& a, const LoadB& b, const Store& store, float* workspace,
                       cudaStream_t stream) {
  if constexpr (I < std::size(kWgmmaTiles)) {
    constexpr WgmmaTile tile = kWgmmaTiles[I];
    if (plan.bm != tile.bm || plan.bn != tile.bn) {
      launch_wgmma_tile<P, I + 1>(plan, a, b, store, workspace, stream);
    } else {
      constexpr int kTileK = kMmaTileWords * MmaFormat<P>::kPerWord;
      launch_dependent(wgmma_gemm_kernel<P, tile.bm, tile.bn, LoadA, LoadB, Store>, plan.grid(), tile.threads(), 0,
                       stream, a.for_k_tile(kTileK), b.for_k_tile(kTileK), store, plan.m, plan.n, plan.k,
                       plan.k_per_split, workspace);
    }
  } else {
    throw Error(ExitCode::kFailure, "internal error: no warpgroup gemm tile " + plan.describe());
  }
}

}  // namespace cnn::cuda
