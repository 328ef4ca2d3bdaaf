// One tiled matrix product, C[M,N] = sum_k A[m,k] * B[k,n], behind every convolution and fully
// connected layer of a general network (kernels/layers/conv.cu, fc.cu). A and B are never
// materialised: a loader computes each element from the layer's tensors (implicit im2col), and a store
// functor puts each result where the layer wants it (with bias, ReLU, a ReLU mask or += as the layer
// needs).
//
//   conv forward   M = n*OH*OW (s,y,x)   N = F            K = C*KH*KW (c,i,j)
//   conv dgrad     M = n*H*W   (s,h,w)   N = C            K = F*KH*KW (f,i,j)
//   conv wgrad     M = F                 N = C*KH*KW + 1  K = n*OH*OW  (the +1 column of ones: bias)
//   fc forward     M = n   N = O   K = I;   fc dgrad  M = n  N = I  K = O;   fc wgrad  M = O  N = I+1  K = n
//
// In fp32 (this file's kernel; mma_gemm.cuh has the tensor-core form of tf32 and bf16, with the same
// loaders and stores, and wgmma_gemm.cuh its warpgroup form on sm_90a): tiles of BM x BN outputs per
// block, BK = 8 deep, 4x4 outputs per thread, double-buffered in shared memory with the next tile's
// loads in flight during the current tile's FMAs (one barrier per tile).
// Split-K (gridDim.z > 1) gives small outputs with long reductions (weight gradients, small batches)
// enough blocks: each split writes its partial product to a workspace and gemm_finalize adds the
// splits IN ORDER and stores. Every sum's order is fixed by the plan (shape and GPU model), never by
// timing: no atomics, so results repeat bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "ops/fast_div.cuh"
#include "cuda/launch.hpp"
#include "ops/gemm_plan.hpp"
#ifdef __CUDACC__
#include "dist/reduce.cuh"
#include "ops/mma_gemm.cuh"
#include "ops/wgmma_gemm.cuh"
#endif

namespace cnn::cuda {

#ifdef __CUDACC__

// ---- the product ----------------------------------------------------------------------------------
// Loader concept (A: index mn = m; B: index mn = n):
//   kKContiguous   consecutive k are adjacent in memory (decides which index the lanes walk)
//   Fixed fixed(int mn) const     per-row part, decoded once per thread (mn may be out of range)
//   Step  step(int k) const       per-k part, decoded once per tile (k may be out of range)
//   float load(Fixed, Step) const the element, 0 out of range
// Store concept: void operator()(int m, int n, float v) const, called once per (m,n) < (M,N).

template <int BM, int BN, class LoadA, class LoadB, class Store>
__global__ void __launch_bounds__(BM* BN / 16)
    gemm_kernel(LoadA load_a, LoadB load_b, Store store, int M, int N, int K, int k_per_split,
                float* __restrict__ workspace /*[splits, N, M] when gridDim.z > 1*/) {
  start_after_previous_kernel();
  constexpr int kThreads = BM * BN / 16;
  constexpr int BK = kGemmBK;
  constexpr int kAPer = BM * BK / kThreads;
  constexpr int kBPer = BN * BK / kThreads;
  constexpr int kPad = 4;  // keeps k-contiguous stores off one bank; rows stay 16-byte aligned
  static_assert(kThreads % BM == 0 && kThreads % BN == 0, "tile shapes: BM, BN in {32, 64, 128}");
  __shared__ __align__(16) float As[2][BK][BM + kPad];
  __shared__ __align__(16) float Bs[2][BK][BN + kPad];

  const int t = threadIdx.x;
  const int m0 = blockIdx.x * BM;
  const int n0 = blockIdx.y * BN;
  const int k_begin = blockIdx.z * k_per_split;
  const int k_end = min(K, k_begin + k_per_split);
  const int tiles = (k_end - k_begin + BK - 1) / BK;

  // Which elements of the A and B tiles this thread loads: (row, k) within the tile.
  int a_mn[kAPer], a_k[kAPer], b_mn[kBPer], b_k[kBPer];
#pragma unroll
  for (int r = 0; r < kAPer; ++r) {
    const int e = t + r * kThreads;
    a_mn[r] = LoadA::kKContiguous ? e / BK : e % BM;
    a_k[r] = LoadA::kKContiguous ? e % BK : e / BM;
  }
#pragma unroll
  for (int r = 0; r < kBPer; ++r) {
    const int e = t + r * kThreads;
    b_mn[r] = LoadB::kKContiguous ? e / BK : e % BN;
    b_k[r] = LoadB::kKContiguous ? e % BK : e / BN;
  }
  typename LoadA::Fixed a_fixed[kAPer];
  typename LoadB::Fixed b_fixed[kBPer];
#pragma unroll
  for (int r = 0; r < kAPer; ++r) a_fixed[r] = load_a.fixed(m0 + a_mn[r]);
#pragma unroll
  for (int r = 0; r < kBPer; ++r) b_fixed[r] = load_b.fixed(n0 + b_mn[r]);

  float a_next[kAPer], b_next[kBPer];
  auto fetch = [&](int k0) {
#pragma unroll
    for (int r = 0; r < kAPer; ++r) {
      const int k = k0 + a_k[r];
      a_next[r] = k < k_end ? load_a.load(a_fixed[r], load_a.step(k)) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kBPer; ++r) {
      const int k = k0 + b_k[r];
      b_next[r] = k < k_end ? load_b.load(b_fixed[r], load_b.step(k)) : 0.0f;
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int r = 0; r < kAPer; ++r) As[buf][a_k[r]][a_mn[r]] = a_next[r];
#pragma unroll
    for (int r = 0; r < kBPer; ++r) Bs[buf][b_k[r]][b_mn[r]] = b_next[r];
  };

  // Lanes walk m first, so a warp's stores of one column cover 64 consecutive rows.
  const int ty = t % (BM / 4);
  const int tx = t / (BM / 4);
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

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
    for (int kk = 0; kk < BK; ++kk) {
      const float4 a = *reinterpret_cast<const float4*>(&As[buf][kk][ty * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w};
      const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    if (more) stash(buf ^ 1);
    __syncthreads();
    buf ^= 1;
  }

  if (gridDim.z == 1) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx * 4 + j;
      if (n >= N) continue;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int m = m0 + ty * 4 + i;
        if (m < M) store(m, n, acc[i][j]);
      }
    }
  } else {
    float* ws = workspace + static_cast<std::int64_t>(blockIdx.z) * N * M;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx * 4 + j;
      if (n >= N) continue;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int m = m0 + ty * 4 + i;
        if (m < M) ws[static_cast<std::int64_t>(n) * M + m] = acc[i][j];
      }
    }
  }
}

// Adds the splits of each (m,n) in split order and stores. Few splits: a thread per output. Many
// (long weight-gradient reductions): for each output, partial l sums splits l, l+32, ... in order,
// then the 32 partials are added as a butterfly over lanes adds them (offsets 16, 8, 4, 2, 1), in
// shared memory: a block per kFinalizeOutputs consecutive outputs, each warp reading one partial's
// splits of all of them (coalesced: consecutive outputs are consecutive floats of a split). (A warp
// per output, its lanes reading 32 splits of one output, used 4 bytes of every 32-byte sector it
// read: 17.5 us for conv3's 52 splits at batch 2048, as long as the product; docs/PERFORMANCE.md.)
constexpr int kFinalizeMaxSplitsPerThread = kMaxSplitsAddedInOrder;  // up to this many splits: a thread per output
constexpr int kFinalizeOutputs = 32;
constexpr int kFinalizePartials = 32;
template <class Store>
__global__ void gemm_finalize_kernel(Store store, const float* __restrict__ workspace, int M, int N, int splits) {
  start_after_previous_kernel();
  const std::int64_t outputs = static_cast<std::int64_t>(M) * N;
  const std::int64_t plane = outputs;
  if (splits <= kFinalizeMaxSplitsPerThread) {
    for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < outputs;
         e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      float sum = 0.0f;
      for (int z = 0; z < splits; ++z) sum += workspace[z * plane + e];
      const int n = static_cast<int>(e / M);
      store(static_cast<int>(e - static_cast<std::int64_t>(n) * M), n, sum);
    }
    return;
  }
  __shared__ float partial_s[kFinalizePartials][kFinalizeOutputs + 1];
  const int lane = static_cast<int>(threadIdx.x % kFinalizeOutputs);
  const int warp = static_cast<int>(threadIdx.x / kFinalizeOutputs);
  const int warps = static_cast<int>(blockDim.x / kFinalizeOutputs);
  for (std::int64_t e0 = blockIdx.x * static_cast<std::int64_t>(kFinalizeOutputs); e0 < outputs;
       e0 += static_cast<std::int64_t>(gridDim.x) * kFinalizeOutputs) {
    const std::int64_t e = e0 + lane;
    for (int l = warp; l < kFinalizePartials; l += warps) {
      float sum = 0.0f;
      if (e < outputs)
        for (int z = l; z < splits; z += kFinalizePartials) sum += workspace[z * plane + e];
      partial_s[l][lane] = sum;
    }
    __syncthreads();
    if (warp == 0 && e < outputs) {
      float v[kFinalizePartials];
#pragma unroll
      for (int l = 0; l < kFinalizePartials; ++l) v[l] = partial_s[l][lane];
#pragma unroll
      for (int offset = kFinalizePartials / 2; offset > 0; offset /= 2)
#pragma unroll
        for (int l = 0; l < offset; ++l) v[l] += v[l + offset];
      const int n = static_cast<int>(e / M);
      store(static_cast<int>(e - static_cast<std::int64_t>(n) * M), n, v[0]);
    }
    __syncthreads();
  }
}

// Queues the fp32 product's main kernel for plan's tile.
template <class LoadA, class LoadB, class Store>
void launch_fp32_tile(const GemmPlan& plan, const LoadA& a, const LoadB& b, const Store& store, float* workspace,
                      cudaStream_t stream) {
  const dim3 grid = plan.grid();
#define CNN_GEMM_CASE(BM_, BN_)                                                                               \
  if (plan.bm == BM_ && plan.bn == BN_) {                                                                     \
    launch_dependent(gemm_kernel<BM_, BN_, LoadA, LoadB, Store>, grid, plan.threads(), 0, stream, a, b, store, \
                     plan.m, plan.n, plan.k, plan.k_per_split, workspace);                                    \
    return;                                                                                                   \
  }
  CNN_GEMM_CASE(128, 32)
  CNN_GEMM_CASE(64, 64)
  CNN_GEMM_CASE(64, 32)
  CNN_GEMM_CASE(32, 64)
  CNN_GEMM_CASE(32, 32)
#undef CNN_GEMM_CASE
  throw Error(ExitCode::kFailure, "internal error: no gemm tile " + std::to_string(plan.bm) + "x" +
                                      std::to_string(plan.bn));
}

// The main kernel of a product over staged chunks: the warpgroup form where the plan names it (both
// operands chunks along k; plan_staged_forward, plan_input_gradient, plan_pool_windows), else
// mma.sync's.
template <Precision P, class LoadA, class LoadB, class Store>
void launch_chunk_tile(const GemmPlan& plan, const LoadA& a, const LoadB& b, const Store& store, float* workspace,
                       cudaStream_t stream) {
  if constexpr (operand_form<LoadA>() == OperandForm::kChunksAlongK &&
                operand_form<LoadB>() == OperandForm::kChunksAlongK) {
    if (plan.wgmma) return launch_wgmma_tile<P>(plan, a, b, store, workspace, stream);
  }
  if (plan.wgmma)
    throw Error(ExitCode::kFailure, "internal error: a warpgroup plan for other operands " + plan.describe());
  launch_mma_tile<P>(plan, a, b, store, workspace, stream);
}

// Queues the product on `stream`, in plan's precision. `workspace` holds plan.workspace_floats()
// (null when splits == 1). add_splits false: a split product's partial sums stay in the workspace for a
// reader that adds them itself (SplitPartials, layer_ops.hpp), and `store` is not called.
template <class LoadA, class LoadB, class Store>
void launch_gemm(const GemmPlan& plan, const LoadA& a, const LoadB& b, const Store& store, float* workspace,
                 cudaStream_t stream, bool add_splits = true) {
  if (plan.m <= 0 || plan.n <= 0) return;
  if constexpr (is_chunked_loader<LoadA>::value || is_chunked_loader<LoadB>::value) {
    // Chunks are staged in tf32 or bf16 (conv_tensor_core.cu): tensor cores only.
    if (plan.precision == Precision::kBf16)
      launch_chunk_tile<Precision::kBf16>(plan, a, b, store, workspace, stream);
    else
      launch_chunk_tile<Precision::kTf32>(plan, a, b, store, workspace, stream);
  } else {
    switch (plan.precision) {
      case Precision::kFp32: launch_fp32_tile(plan, a, b, store, workspace, stream); break;
      case Precision::kTf32: launch_mma_tile<Precision::kTf32>(plan, a, b, store, workspace, stream); break;
      case Precision::kBf16: launch_mma_tile<Precision::kBf16>(plan, a, b, store, workspace, stream); break;
    }
  }
  CNN_CHECK_LAUNCH();
  if (plan.splits > 1 && add_splits) {
    const std::int64_t outputs = std::int64_t{plan.m} * plan.n;
    const std::int64_t threads_needed =
        plan.splits <= kFinalizeMaxSplitsPerThread ? outputs : ceil_div(outputs, kFinalizeOutputs) * kBlockThreads;
    launch_dependent(gemm_finalize_kernel<Store>, grid_for(threads_needed), kBlockThreads, 0, stream, store, workspace,
                     plan.m, plan.n, plan.splits);
    CNN_CHECK_LAUNCH();
  }
}

// ---- loaders shared by the fully connected products -----------------------------------------------

// A row-major matrix viewed as [mn, k] with strides; rows >= `rows` read 0, except row `ones_row`
// (when >= 0), which reads 1 (the bias column of a weight-gradient product).
template <bool kKContig>
struct StridedLoader {
  static constexpr bool kKContiguous = kKContig;
  const float* p = nullptr;
  int rows = 0, depth = 0;  // valid mn < rows, k < depth
  int ones_row = -1;
  std::int64_t ld_mn = 0, ld_k = 0;
  struct Fixed {
    std::int64_t offset;
    int kind;  // 0 data, 1 ones, 2 nothing
  };
  using Step = int;
  __device__ __forceinline__ Fixed fixed(int mn) const {
    if (mn < rows) return {mn * ld_mn, 0};
    return {0, mn == ones_row ? 1 : 2};
  }
  __device__ __forceinline__ Step step(int k) const { return k; }
  __device__ __forceinline__ float load(const Fixed& f, Step k) const {
    if (f.kind != 0) return f.kind == 1 && k < depth ? 1.0f : 0.0f;
    return k < depth ? __ldg(p + f.offset + k * ld_k) : 0.0f;
  }
};

#endif  // __CUDACC__

}  // namespace cnn::cuda
