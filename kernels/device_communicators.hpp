// Communicators for gradients in device memory. Both queue their work on the backend's stream, so
// the allreduce is ordered after the step that wrote the gradients and before the update that reads
// them, with no extra synchronisation.
#pragma once

#include <memory>

#include "cnn/communicator.hpp"
#include "device_backend.hpp"

namespace cnn::cuda {

// What both device communicators share: the world they reduce over and the backend's stream their
// work is queued on. A barrier must also wait for that queued work.
class StreamCommunicator : public Communicator {
 public:
  StreamCommunicator(const MpiWorld& world, DeviceBackend& backend) : world_(world), stream_(backend.stream()) {}
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  void barrier() override;
  int rank() const override { return world_.rank(); }
  int size() const override { return world_.size(); }
  int local_rank() const override { return world_.local_rank(); }

 protected:
  const MpiWorld& world_;
  cudaStream_t stream_;
};

#ifdef CNN_HAVE_NCCL
// ncclAllReduce / ncclBroadcast; the unique id goes from rank 0 to all over MPI_Bcast.
std::unique_ptr<Communicator> make_nccl_communicator(const MpiWorld& world, DeviceBackend& backend);
#endif

// Copies device -> pinned host buffer, MPI_Allreduce in place, copies back. For builds without NCCL.
std::unique_ptr<Communicator> make_host_staged_communicator(const MpiWorld& world, DeviceBackend& backend);

}  // namespace cnn::cuda
