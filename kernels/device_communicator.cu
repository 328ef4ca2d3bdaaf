// make_device_communicator: NCCL, peer memory or MPI through host staging, by name; which one a run
// starts with; and what they share.
#include "cnn/cuda_backend.hpp"
#include "cnn/errors.hpp"
#include "cuda_check.hpp"
#include "device_communicators.hpp"

namespace cnn {

// Queued collectives count as done only once the stream has run them.
void cuda::StreamCommunicator::barrier() {
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
  world_.barrier();
}

std::unique_ptr<Communicator> make_device_communicator(const MpiWorld& world, Backend& backend, const std::string& path) {
  const DeviceQueue* queue = backend.device_queue();
  if (queue == nullptr)
    throw Error(ExitCode::kFailure, "internal error: a device communicator needs the cuda backend, not " + backend.name());
  if (path == "mpi") return cuda::make_host_staged_communicator(world, queue->stream);
  if (path == "peer") return cuda::make_peer_communicator(world, queue->device, queue->stream, queue->floats);
#ifdef CNN_HAVE_NCCL
  if (path == "nccl") return cuda::make_nccl_communicator(world, queue->device, queue->stream);
#endif
  throw UsageError("--allreduce " + path + ": not available in this build (available: " +
                   (device_nccl_available() ? "nccl, peer, mpi" : "peer, mpi") + ")");
}

std::string device_allreduce_path(const std::string& requested) {
  if (requested == "mpi" || requested == "peer") return requested;
  return device_nccl_available() ? "nccl" : "mpi";
}

std::string device_peer_unavailable(const MpiWorld& world, Backend& backend) {
  const DeviceQueue* queue = backend.device_queue();
  if (queue == nullptr) return "not the cuda backend";
  return cuda::peer_allreduce_unavailable(world, queue->device);
}

bool device_nccl_available() {
#ifdef CNN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

}  // namespace cnn
