// The tensor-core form of the implicit matrix product (implicit_gemm.cuh), for --precision tf32 and
// bf16: the same loader concept (implicit im2col and friends, plus staged chunks) and the same stores
// (bias, ReLU, mask, split-K workspace), so every fusion of the fp32 product holds in every
// precision. Each operand element is rounded once, to tf32 (cvt.rna) or bf16 (round to nearest
// even), when it is loaded or staged, and warps multiply tiles with mma.sync (m16n8k8 tf32, or
// m16n8k16 bf16), accumulating in fp32.
//
// A block is WARPS_M x WARPS_N warps (8, or 4 for the tiles that give each warp a larger piece;
// kMmaTiles, gemm_plan.hpp) over a BM x BN tile; each warp owns a (BM/WARPS_M) x (BN/WARPS_N) piece
// of 16x8 mma tiles (32x16 to 64x32), and reads per k step one ldmatrix x4 per 16 rows of A and one
// per two 8-wide n tiles of B, with one barrier per k tile. Two pipelines, by the operands' form:
//   elements  (mma_gemm_kernel) the next tile's loads go to registers during the current tile's
//             mma, and are rounded and stored to shared memory after it: two stages.
//   chunks    (mma_gemm_async_kernel) 16-byte chunks go from global to shared memory with cp.async,
//             through registers never, 2 to 4 stages deep (as many as 48 KiB of shared memory
//             holds): three k tiles in flight where the register path had one, and no registers
//             held for them. Each chunk's k stays decoded in registers and moves on by a k tile
//             by adding (the loaders' cursors, conv_chunk_loaders.cuh), not by two divisions per
//             chunk and tile.
//
// A store takes one output at a time, or (Store::kPoolWindows) the four outputs of a 2x2 pool window
// that a thread holds when the rows come in pool-window order (MmaWarpTile::store_windows).
//
// The operands' forms and their pipes (elements, chunks along k, chunks across the rows) are in
// mma_operand_pipes.cuh.
//
// The order of every sum is fixed by the split of k (the plan) and the mma instruction: k tiles in
// order, each tile's mma k steps in order. Which block or warp holds an output does not enter it, so
// every tile of one split repeats the same bits on the same GPU model (tests/gpu_mma_tiles.cpp).
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
#include "ops/mma_operand_pipes.cuh"

namespace cnn::cuda {

// A store that takes whole 2x2 pool windows (Store::kPoolWindows, MmaWarpTile::store_windows)
// instead of one output at a time.
template <class Store, class = void>
struct stores_pool_windows : std::false_type {};
template <class Store>
struct stores_pool_windows<Store, std::void_t<decltype(Store::kPoolWindows)>> : std::bool_constant<Store::kPoolWindows> {};

// What both kernels share: a warp's place in the block tile, its accumulators, the mma of one k tile
// held in shared memory, and the store of the results.
template <Precision P, int BM, int BN, int WARPS_M, int WARPS_N, class PipeA, class PipeB>
struct MmaWarpTile {
  using Format = MmaFormat<P>;
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
      if constexpr (NJ % 2 == 0) {
        // Two n tiles per ldmatrix: x4 where two x2 were.
#pragma unroll
        for (int j = 0; j < NJ; j += 2) {
          std::uint32_t pair[4];
          PipeB::b_pair(bs, s, wn0 + 8 * j, lane, pair);
          fb[j][0] = pair[0], fb[j][1] = pair[1], fb[j + 1][0] = pair[2], fb[j + 1][1] = pair[3];
        }
      } else {
#pragma unroll
        for (int j = 0; j < NJ; ++j) PipeB::b(bs, s, wn0 + 8 * j, lane, fb[j]);
      }
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
    if constexpr (stores_pool_windows<Store>::value) {
      store_windows(store, m0, n0);
    } else {
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
  }

  // The rows in pool-window order (PoolOrderedWindowA). With warp pieces of 32 rows (mma.sync), each
  // 32 rows are 8 windows of 2x2, row 16*dy + 8*dx + w holding element (dy, dx) of window w, so mma
  // tiles i and i + 1 hold a window's four outputs in one thread, in accumulators h and h + 2 of each.
  // With warp pieces of 16 rows (a warpgroup's warps, wgmma_gemm.cuh), each 16 rows are 4 windows, row
  // 8*dy + 4*dx + w: a thread of group w < 4 holds the window's left column (dy 0 and 1, in h and
  // h + 2), and the lane 16 on (group w + 4) its right column; one shuffle per value gives each of the
  // two lanes whole windows of alternate 8-column groups. The pool takes its maximum in registers.
  // store.window(window, n, z_n, z_n1) gets the four outputs of columns n and n + 1 in row-major order
  // (dy*2 + dx), before bias; it tests the window and n.
  template <class Store>
  __device__ __forceinline__ void store_windows(const Store& store, int m0, int n0) const {
    const int group = lane >> 2, quad = lane & 3;
    if constexpr (MI == 1) {
      static_assert(NJ % 2 == 0, "pairs of 8-column groups");
      const int window = (m0 + wm0) / 4 + (group & 3);
      const bool left = group < 4;
#pragma unroll
      for (int j = 0; j < NJ; j += 2) {
        // The left lane stores the windows of columns group j, the right lane those of group j + 1:
        // each sends the other its half of the other's group.
        const int mine = left ? j : j + 1;
        float dx0[4], dx1[4];  // the window's column dx = 0 and 1, in accumulator order h
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const float other = __shfl_xor_sync(0xffffffffu, left ? acc[0][j + 1][h] : acc[0][j][h], 16);
          const float own = left ? acc[0][j][h] : acc[0][j + 1][h];
          dx0[h] = left ? own : other;
          dx1[h] = left ? other : own;
        }
        // (dy, dx) in row-major order; h and h + 2 are dy = 0 and 1, odd h the column n + 1.
        const float z0[4] = {dx0[0], dx1[0], dx0[2], dx1[2]};
        const float z1[4] = {dx0[1], dx1[1], dx0[3], dx1[3]};
        store.window(window, n0 + wn0 + 8 * mine + 2 * quad, z0, z1);
      }
    } else {
      static_assert(MI % 2 == 0, "a pool-window store needs warp pieces of 16 or whole 32 rows");
#pragma unroll
      for (int i = 0; i < MI; i += 2) {
        const int window = (m0 + wm0 + 16 * i) / 4 + group;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const float z0[4] = {acc[i][j][0], acc[i][j][2], acc[i + 1][j][0], acc[i + 1][j][2]};
          const float z1[4] = {acc[i][j][1], acc[i][j][3], acc[i + 1][j][1], acc[i + 1][j][3]};
          store.window(window, n0 + wn0 + 8 * j + 2 * quad, z0, z1);
        }
      }
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
template <Precision P, int BM, int BN, int WARPS_M, int WARPS_N, class LoadA, class LoadB, class Store>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N)
    mma_gemm_kernel(LoadA load_a, LoadB load_b, Store store, int M, int N, int K, int k_per_split,
                    float* __restrict__ workspace /*[splits, N, M] when gridDim.z > 1*/) {
  start_after_previous_kernel();
  constexpr int BK = kMmaTileWords * MmaFormat<P>::kPerWord;
  constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  using PipeA = OperandPipe<P, BM, kThreads, LoadA>;
  using PipeB = OperandPipe<P, BN, kThreads, LoadB>;
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
  MmaWarpTile<P, BM, BN, WARPS_M, WARPS_N, PipeA, PipeB> warp(t);

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

// Queues k tile `tile` of both chunk operands into its stage of As and Bs (none past the last tile)
// and commits the copies as one cp.async group (empty past the last tile, so that the group count
// stays one per tile). The pipes issue their tiles in order, once.
template <int kStages, class PipeA, class PipeB, class LoadA, class LoadB, class TileA, class TileB>
__device__ __forceinline__ void issue_chunk_tile(int tile, int tiles, PipeA& a, PipeB& b, TileA* As, TileB* Bs,
                                                 const LoadA& load_a, const LoadB& load_b, int t, int k_end) {
  if (tile < tiles) {
    const int stage = tile % kStages;
    a.issue(As[stage], load_a, t, k_end);
    b.issue(Bs[stage], load_b, t, k_end);
  }
  cp_async_commit();
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
template <Precision P, int BM, int BN, int WARPS_M, int WARPS_N, class LoadA, class LoadB, class Store>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, (MmaTile{BM, BN, WARPS_M, WARPS_N}.min_blocks()))
    mma_gemm_async_kernel(LoadA load_a, LoadB load_b, Store store, int M, int N, int K, int k_per_split,
                          float* __restrict__ workspace /*[splits, N, M] when gridDim.z > 1*/) {
  start_after_previous_kernel();
  constexpr int BK = kMmaTileWords * MmaFormat<P>::kPerWord;
  constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  using PipeA = OperandPipe<P, BM, kThreads, LoadA>;
  using PipeB = OperandPipe<P, BN, kThreads, LoadB>;
  constexpr int kStages = AsyncStages<PipeA, PipeB>::value;
  __shared__ __align__(16) typename PipeA::Tile As[kStages];
  __shared__ __align__(16) typename PipeB::Tile Bs[kStages];

  const int t = threadIdx.x;
  const BlockTile block(BM, BN, BK, K, k_per_split);
  const int m0 = block.m0, n0 = block.n0, k_begin = block.k_begin, k_end = block.k_end, tiles = block.tiles;

  // Each pipe starts at k_begin and moves on by a k tile per issue: tiles are issued in order, once.
  PipeA a(load_a, m0, t, k_begin);
  PipeB b(load_b, n0, t, k_begin);
  auto issue = [&](int tile) { issue_chunk_tile<kStages>(tile, tiles, a, b, As, Bs, load_a, load_b, t, k_end); };
  MmaWarpTile<P, BM, BN, WARPS_M, WARPS_N, PipeA, PipeB> warp(t);

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
    // A pool-window store is built for the tiles plan_pool_windows may pick only.
    constexpr bool kBuilt = !stores_pool_windows<Store>::value || tile.holds_pool_windows();
    if constexpr (!kBuilt) {
      launch_mma_tile<P, I + 1>(plan, a, b, store, workspace, stream);
    } else if (plan.bm != tile.bm || plan.bn != tile.bn || plan.warps_m != tile.warps_m ||
               plan.warps_n != tile.warps_n) {
      launch_mma_tile<P, I + 1>(plan, a, b, store, workspace, stream);
    } else if constexpr (is_chunked_loader<LoadA>::value) {
      // The chunk loaders advance their decoded k by the kernel's k tile, which they learn here.
      constexpr int kTileK = kMmaTileWords * MmaFormat<P>::kPerWord;
      launch_dependent(mma_gemm_async_kernel<P, tile.bm, tile.bn, tile.warps_m, tile.warps_n, LoadA, LoadB, Store>,
                       plan.grid(), tile.threads(), 0, stream, a.for_k_tile(kTileK), b.for_k_tile(kTileK), store,
                       plan.m, plan.n, plan.k, plan.k_per_split, workspace);
    } else {
      launch_dependent(mma_gemm_kernel<P, tile.bm, tile.bn, tile.warps_m, tile.warps_n, LoadA, LoadB, Store>,
                       plan.grid(), tile.threads(), 0, stream, a, b, store, plan.m, plan.n, plan.k, plan.k_per_split,
                       workspace);
    }
  } else {
    throw Error(ExitCode::kFailure, "internal error: no tensor-core gemm tile " + plan.describe());
  }
}

}  // namespace cnn::cuda
