// A peer area: memory every GPU of a one-node world maps (CUDA IPC over NVLink or PCIe), for kernels
// that sum over ranks with remote stores ("push") and meet their peers through flags in it: the peer
// allreduce (peer_allreduce.cuh) and the persistent seed kernel's in-kernel exchange
// (ops/seed_persistent_exchange.cuh). Each rank allocates its own area, exports it with
// cudaIpcGetMemHandle and maps every other rank's; kernels see them all through a PeerView.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cnn/communicator.hpp"

namespace cnn::cuda {

constexpr int kPeerMaxRanks = 8;
// Blocks that meet their peers: the allreduce kernel's grid, or the persistent seed kernel's, one
// block per multiprocessor (132 on an H100, 148 on a B200).
constexpr int kPeerMaxBlocks = 256;
// Measured on nvidia-h200-x4 (kernels/bench/NOTES.md, "peer allreduce"): 64 blocks beat 16, 32 and 128
// for buffers of 0.4-1.5 MB on 2 and 4 GPUs.
constexpr int kPeerDefaultBlocks = 64;
constexpr int kPeerThreads = 512;

// The start of every rank's peer area; the two staging slots follow at kPeerStagingOffset, each
// ranks + 1 regions of slot_floats: the inboxes from ranks 0..n-1, then the result region.
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
  std::int64_t slot_floats;  // floats per region of a staging slot, a multiple of 4
};

// Floats of one rank's staging (both slots) for `ranks` ranks.
#ifdef __CUDACC__
__host__ __device__
#endif
constexpr std::int64_t peer_staging_floats(int ranks, std::int64_t slot_floats) {
  return 2 * (ranks + 1) * slot_floats;
}

// This rank's area and the mapped areas of the others. Collective to make (every rank at the same
// point): the handles travel by MPI_Allgather, and a barrier makes sure every rank has mapped every
// area before any kernel signals into it. The flags and epochs start at 0.
class PeerArea {
 public:
  PeerArea(const MpiWorld& world, int device, std::int64_t slot_floats);
  ~PeerArea();
  PeerArea(const PeerArea&) = delete;
  PeerArea& operator=(const PeerArea&) = delete;

  const PeerView& view() const { return view_; }

 private:
  char* own_ = nullptr;
  std::vector<void*> mapped_;
  PeerView view_{};
};

}  // namespace cnn::cuda
