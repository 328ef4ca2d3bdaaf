// The peer allreduce kernel: a sum over ranks through memory every GPU maps (CUDA IPC over NVLink or
// PCIe), for gradients of a few MB, where NCCL's ring spends most of its time in latency.
//
// Every rank exports one "peer area" (PeerFlags, then two staging slots). Two-shot: the buffer is cut
// into one chunk per rank; within a chunk, into one piece per block. Block b of every rank:
//   1. copies piece b of every chunk of its gradients into its own staging slot;
//   2. meets block b of every other rank (flag barrier 0), then sums piece b of its OWN chunk over
//      the ranks' staging slots, in rank order 0, 1, ..., n-1, into its staging slot and gradients;
//   3. meets them again (barrier 1), then copies piece b of every OTHER chunk, already summed by its
//      owner, from the owner's staging slot into its gradients.
// One-shot (one chunk, one barrier): every rank sums piece b of the whole buffer over all ranks'
// slots itself. It reads n - 1 times the buffer from the other GPUs where two-shot reads about twice
// it, so it only wins on small buffers, where the second barrier's latency dominates.
// Both sum every element in rank order, so all ranks hold the same bits, whatever the variant and the
// bucket plan (an allreduce of a sub-range sums each element exactly as the whole one would).
//
// Block b only ever waits for block b of the other ranks, which touched the same pieces, so no block
// waits for another block of its own grid. The flags hold a per-block epoch (the number of allreduces
// that block has run), kept in device memory, so a CUDA graph replays the kernel unchanged; every
// launch of a communicator uses the same grid, so epochs agree between ranks. The two staging slots
// alternate by epoch: a rank writes slot s again only two allreduces later, after a barrier of the
// allreduce in between that every other rank reached only once its previous kernel, the last reader
// of slot s, had finished (kernels on one stream run in order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cnn::cuda {

constexpr int kPeerMaxRanks = 8;
constexpr int kPeerMaxBlocks = 128;
// Measured on nvidia-h200-x4 (kernels/bench/NOTES.md, "peer allreduce"): 64 blocks beat 16, 32 and 128
// for buffers of 0.4-1.5 MB on 2 and 4 GPUs.
constexpr int kPeerDefaultBlocks = 64;
constexpr int kPeerThreads = 512;

// The start of every rank's peer area; the two staging slots follow at kPeerStagingOffset.
struct PeerFlags {
  unsigned int arrived[2][kPeerMaxRanks][kPeerMaxBlocks];  // [barrier][from rank][block]: epoch written by that rank
  unsigned int epoch[kPeerMaxBlocks];                       // allreduces run by each block (read by this rank only)
};
constexpr std::size_t kPeerStagingOffset = (sizeof(PeerFlags) + 255) / 256 * 256;

// Every rank's peer area as this process maps it (its own: the local pointer).
struct PeerView {
  char* area[kPeerMaxRanks];
  int rank;
  int ranks;
  std::int64_t slot_floats;  // floats per staging slot, a multiple of 4
};

__device__ inline PeerFlags* peer_flags(const PeerView& v, int rank) { return reinterpret_cast<PeerFlags*>(v.area[rank]); }
__device__ inline float* peer_slot(const PeerView& v, int rank, unsigned int epoch) {
  return reinterpret_cast<float*>(v.area[rank] + kPeerStagingOffset) + (epoch & 1u) * v.slot_floats;
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
// `barrier`, then waits until rank q has told it the same. The fence publishes the block's staging
// writes (ordered before by __syncthreads) to the other GPUs before the flag.
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
// kPeerMaxBlocks) x kPeerThreads.
template <int W, bool kTwoShot>
__global__ void __launch_bounds__(kPeerThreads) peer_allreduce_kernel(PeerView v, float* data, std::int64_t count) {
  using A = PeerAccess<W>;
  __shared__ unsigned int epoch_shared;
  PeerFlags* own = peer_flags(v, v.rank);
  if (threadIdx.x == 0) epoch_shared = own->epoch[blockIdx.x] + 1u;
  __syncthreads();
  const unsigned int epoch = epoch_shared;
  const std::int64_t units = (count + W - 1) / W;
  const int chunks = kTwoShot ? v.ranks : 1;
  float* mine = peer_slot(v, v.rank, epoch);

  for (int c = 0; c < chunks; ++c) {  // 1. piece b of every chunk -> own staging
    const PeerPiece p = peer_piece(units, chunks, c);
    for (std::int64_t u = p.begin + threadIdx.x; u < p.end; u += blockDim.x) A::store_staged(mine, u, A::load(data, u, count));
  }
  peer_barrier(v, 0, epoch);

  {  // 2. piece b of this rank's chunk (one-shot: of the whole buffer), summed over ranks in rank order
    const PeerPiece p = peer_piece(units, chunks, kTwoShot ? v.rank : 0);
    for (std::int64_t u = p.begin + threadIdx.x; u < p.end; u += blockDim.x) {
      typename A::Vec s = A::load_staged(peer_slot(v, 0, epoch), u);
      for (int q = 1; q < v.ranks; ++q) A::add(s, A::load_staged(peer_slot(v, q, epoch), u));
      if (kTwoShot) A::store_staged(mine, u, s);
      A::store(data, u, count, s);
    }
  }
  if (kTwoShot) {
    peer_barrier(v, 1, epoch);
    for (int c = 0; c < chunks; ++c) {  // 3. piece b of every other chunk, from its owner
      if (c == v.rank) continue;
      const float* owner = peer_slot(v, c, epoch);
      const PeerPiece p = peer_piece(units, chunks, c);
      for (std::int64_t u = p.begin + threadIdx.x; u < p.end; u += blockDim.x) A::store(data, u, count, A::load_staged(owner, u));
    }
  }
  if (threadIdx.x == 0) own->epoch[blockIdx.x] = epoch;
}

}  // namespace cnn::cuda
