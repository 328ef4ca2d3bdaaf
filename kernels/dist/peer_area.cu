// PeerArea: see peer_area.hpp.
#include "dist/peer_area.hpp"

#include <mpi.h>

#include <algorithm>

#include "cnn/flight_recorder.hpp"
#include "cnn/mpi_check.hpp"
#include "cuda/cuda_check.hpp"

namespace cnn::cuda {

PeerArea::PeerArea(const MpiWorld& world, int device, std::int64_t slot_floats) {
  CNN_CHECK_CUDA(cudaSetDevice(device));
  view_.rank = world.rank();
  view_.ranks = world.size();
  view_.slot_floats = (std::max<std::int64_t>(slot_floats, 1) + 3) / 4 * 4;
  const std::size_t bytes =
      kPeerStagingOffset + static_cast<std::size_t>(peer_staging_floats(world.size(), view_.slot_floats)) * sizeof(float);
  // cudaMalloc, not a pool: only such memory can be exported. Flags and epochs start at 0.
  CNN_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&own_), bytes));
  CNN_CHECK_CUDA(cudaMemset(own_, 0, bytes));
  CNN_CHECK_CUDA(cudaDeviceSynchronize());  // the zeros are in place before any peer can signal
  cudaIpcMemHandle_t handle{};
  CNN_CHECK_CUDA(cudaIpcGetMemHandle(&handle, own_));
  std::vector<cudaIpcMemHandle_t> handles(static_cast<std::size_t>(world.size()));
  recorded_collective(CollectiveOp::kAllgather, sizeof(handle), [&] {
    CNN_CHECK_MPI(MPI_Allgather(&handle, sizeof(handle), MPI_BYTE, handles.data(), sizeof(handle), MPI_BYTE, world.comm()));
  });
  for (int q = 0; q < world.size(); ++q) {
    if (q == world.rank()) {
      view_.area[q] = own_;
      continue;
    }
    void* mapped = nullptr;
    CNN_CHECK_CUDA(cudaIpcOpenMemHandle(&mapped, handles[static_cast<std::size_t>(q)], cudaIpcMemLazyEnablePeerAccess));
    view_.area[q] = static_cast<char*>(mapped);
    mapped_.push_back(mapped);
  }
  world.barrier();  // every rank has mapped every area before the first kernel signals into it
}

// Whoever holds the area has waited for the kernels that use it; cudaFree waits for the device.
PeerArea::~PeerArea() {
  for (void* p : mapped_) (void)cudaIpcCloseMemHandle(p);  // cannot throw from here
  if (own_ != nullptr) (void)cudaFree(own_);
}

}  // namespace cnn::cuda
