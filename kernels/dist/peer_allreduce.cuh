// The peer allreduce kernel: a sum over ranks through memory every GPU maps (CUDA IPC over NVLink or
// PCIe), for gradients of a few MB, where NCCL's ring spends most of its time in latency.
//
// Data moves by remote stores only ("push"): a store to another GPU is posted and goes on, where a
// remote load waits a round trip, so a few threads keep NVLink busy; every load is from local memory.
// Every rank exports one "peer area": PeerFlags, then two staging slots (alternating by epoch), each
// an inbox per sending rank and a result region, all with the gradient buffer's own offsets.
// Two-shot: the buffer is cut into one chunk per rank, each chunk into one piece per block. Block b of
// every rank:
//   1. stores piece b of chunk c of its gradients into rank c's inbox from this rank, for every c;
//   2. meets block b of every other rank (flag barrier 0), then sums piece b of its OWN chunk over its
//      inboxes, in rank order 0, 1, ..., n-1, into its gradients and into every rank's result region;
//   3. meets them again (barrier 1), then copies piece b of every OTHER chunk, summed by its owner,
//      from its own result region into its gradients.
// One-shot (one chunk, one barrier): every rank stores piece b of the whole buffer into every rank's
// inbox, then sums piece b of its own inboxes. It sends n - 1 times the buffer where two-shot sends
// about twice it, so it only wins on small buffers, where the second barrier's latency dominates.
// Both sum every element in rank order, so all ranks hold the same bits, whatever the variant and the
// bucket plan (an allreduce of a sub-range sums each element exactly as the whole one would); the
// bits are also those of the earlier pulling kernel, which summed in the same order.
//
// Block b only ever waits for block b of the other ranks, which touched the same pieces, so no block
// waits for another block of its own grid. The flags hold a per-block epoch (the number of allreduces
// that block has run), kept in device memory, so a CUDA graph replays the kernel unchanged; every
// launch of a communicator uses the same grid, so epochs agree between ranks. A rank stores into
// slot s of another rank again only two allreduces later, after the barriers of the allreduce in
// between, which that rank reached only once its previous kernel, the last reader of slot s, had
// finished (kernels on one stream run in order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/dependent_launch.cuh"
#include "dist/peer_area.hpp"

namespace cnn::cuda {

__device__ inline PeerFlags* peer_flags(const PeerView& v, int rank) { return reinterpret_cast<PeerFlags*>(v.area[rank]); }
__device__ inline float* peer_region(const PeerView& v, int rank, unsigned int epoch, int region) {
  float* staging = reinterpret_cast<float*>(v.area[rank] + kPeerStagingOffset);
  return staging + ((epoch & 1u) * (v.ranks + 1) + region) * v.slot_floats;
}
// Rank `rank`'s inbox for what rank `from` sends, and its result region.
__device__ inline float* peer_inbox(const PeerView& v, int rank, int from, unsigned int epoch) {
  return peer_region(v, rank, epoch, from);
}
__device__ inline float* peer_result(const PeerView& v, int rank, unsigned int epoch) {
  return peer_region(v, rank, epoch, v.ranks);
}
__device__ inline void store_release_system(unsigned int* flag, unsigned int value) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}
__device__ inline unsigned int load_acquire_system(const unsigned int* flag) {
  unsigned int value;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(flag) : "memory");
  return value;
}

// Block b meets block b of every rank: thread q tells rank q this block has reached `epoch` at
// `barrier`, then waits until rank q has told it the same. The fence publishes the block's stores
// into the other GPUs' staging (ordered before by __syncthreads) before the flag.
__device__ inline void peer_barrier(const PeerView& v, int barrier, unsigned int epoch) {
  __syncthreads();
  const int q = static_cast<int>(threadIdx.x);
  if (q < v.ranks) {
    __threadfence_system();
    store_release_system(&peer_flags(v, q)->arrived[barrier][v.rank][blockIdx.x], epoch);
    const unsigned int* mine = &peer_flags(v, v.rank)->arrived[barrier][q][blockIdx.x];
    // Wrap-safe: rank q's flag is epoch - 1 until it arrives.
    while (static_cast<int>(load_acquire_system(mine) - epoch) < 0) {
    }
  }
  __syncthreads();
}

// W floats per access: 4 (float4) when the gradient pointer is 16-byte aligned, else 1. The buffer's
// last access may be partial; the staging slots are padded to whole accesses.
template <int W>
struct PeerAccess;
template <>
struct PeerAccess<4> {
  using Vec = float4;
  __device__ static Vec load(const float* data, std::int64_t unit, std::int64_t count) {
    const std::int64_t i = 4 * unit;
    if (i + 4 <= count) return reinterpret_cast<const float4*>(data)[unit];
    Vec v{0.0f, 0.0f, 0.0f, 0.0f};
    if (i < count) v.x = data[i];
    if (i + 1 < count) v.y = data[i + 1];
    if (i + 2 < count) v.z = data[i + 2];
    return v;
  }
  __device__ static void store(float* data, std::int64_t unit, std::int64_t count, Vec v) {
    const std::int64_t i = 4 * unit;
    if (i + 4 <= count) {
      reinterpret_cast<float4*>(data)[unit] = v;
      return;
    }
    if (i < count) data[i] = v.x;
    if (i + 1 < count) data[i + 1] = v.y;
    if (i + 2 < count) data[i + 2] = v.z;
  }
  // Staging is read from L2 (ld.global.cg): another GPU wrote it, and L1 is not coherent.
  __device__ static Vec load_staged(const float* slot, std::int64_t unit) { return __ldcg(reinterpret_cast<const float4*>(slot) + unit); }
  __device__ static void store_staged(float* slot, std::int64_t unit, Vec v) { reinterpret_cast<float4*>(slot)[unit] = v; }
  __device__ static void add(Vec& s, const Vec& x) {
    s.x += x.x;
    s.y += x.y;
    s.z += x.z;
    s.w += x.w;
  }
};
template <>
struct PeerAccess<1> {
  using Vec = float;
  __device__ static Vec load(const float* data, std::int64_t unit, std::int64_t) { return data[unit]; }
  __device__ static void store(float* data, std::int64_t unit, std::int64_t, Vec v) { data[unit] = v; }
  __device__ static Vec load_staged(const float* slot, std::int64_t unit) { return __ldcg(slot + unit); }
  __device__ static void store_staged(float* slot, std::int64_t unit, Vec v) { slot[unit] = v; }
  __device__ static void add(Vec& s, const Vec& x) { s += x; }
};

// Piece b (this block's) of chunk c of `chunks`, in accesses: [begin, end).
struct PeerPiece {
  std::int64_t begin;
  std::int64_t end;
};
__device__ inline PeerPiece peer_piece(std::int64_t units, int chunks, int chunk) {
  const std::int64_t per_chunk = (units + chunks - 1) / chunks;
  const std::int64_t per_piece = (per_chunk + gridDim.x - 1) / gridDim.x;
  const std::int64_t chunk_end = min(units, (chunk + 1) * per_chunk);
  const std::int64_t begin = min(chunk_end, chunk * per_chunk + blockIdx.x * per_piece);
  return {begin, min(chunk_end, begin + per_piece)};
}

// In place over `data` (count floats, count <= slot_floats); grid: the communicator's blocks (at most
// kPeerMaxBlocks) x kPeerThreads. At most 32 registers a thread (16K a block), so that a block fits on a
// multiprocessor beside the four blocks of the conv sweep it runs under in the fc-first step (48
// registers x 256 threads each): the sweep's plan keeps the grid to one wave of those.
template <int W, bool kTwoShot>
__global__ void __launch_bounds__(kPeerThreads, 4) peer_allreduce_kernel(PeerView v, float* data, std::int64_t count) {
  start_after_previous_kernel();  // before touching the gradients the kernel before wrote
  using A = PeerAccess<W>;
  __shared__ unsigned int epoch_shared;
  PeerFlags* own = peer_flags(v, v.rank);
  if (threadIdx.x == 0) epoch_shared = own->epoch[blockIdx.x] + 1u;
  __syncthreads();
  const unsigned int epoch = epoch_shared;
  const std::int64_t units = (count + W - 1) / W;
  const int chunks = kTwoShot ? v.ranks : 1;

  for (int c = 0; c < chunks; ++c) {  // 1. piece b of chunk c -> the inbox from this rank of its owner(s)
    const PeerPiece p = peer_piece(units, chunks, c);
    for (std::int64_t u = p.begin + threadIdx.x; u < p.end; u += blockDim.x) {
      const typename A::Vec x = A::load(data, u, count);
      if (kTwoShot) {
        A::store_staged(peer_inbox(v, c, v.rank, epoch), u, x);
      } else {
        for (int q = 0; q < v.ranks; ++q) A::store_staged(peer_inbox(v, q, v.rank, epoch), u, x);
      }
    }
  }
  peer_barrier(v, 0, epoch);

  {  // 2. piece b of this rank's chunk (one-shot: of the whole buffer), summed over ranks in rank order
    const PeerPiece p = peer_piece(units, chunks, kTwoShot ? v.rank : 0);
    for (std::int64_t u = p.begin + threadIdx.x; u < p.end; u += blockDim.x) {
      typename A::Vec s = A::load_staged(peer_inbox(v, v.rank, 0, epoch), u);
      for (int q = 1; q < v.ranks; ++q) A::add(s, A::load_staged(peer_inbox(v, v.rank, q, epoch), u));
      A::store(data, u, count, s);
      if (kTwoShot)
        for (int q = 0; q < v.ranks; ++q)
          if (q != v.rank) A::store_staged(peer_result(v, q, epoch), u, s);
    }
  }
  if (kTwoShot) {
    peer_barrier(v, 1, epoch);
    const float* summed = peer_result(v, v.rank, epoch);
    for (int c = 0; c < chunks; ++c) {  // 3. piece b of every other chunk, as its owner sent it
      if (c == v.rank) continue;
      const PeerPiece p = peer_piece(units, chunks, c);
      for (std::int64_t u = p.begin + threadIdx.x; u < p.end; u += blockDim.x) A::store(data, u, count, A::load_staged(summed, u));
    }
  }
  if (threadIdx.x == 0) own->epoch[blockIdx.x] = epoch;
}

}  // namespace cnn::cuda
