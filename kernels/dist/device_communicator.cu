// make_device_communicator: NCCL, peer memory or MPI through host staging, by name; which one a run
// starts with; and what they share.
#include <limits>
#include <string>

#include "cnn/cuda_backend.hpp"
#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"
#include "dist/device_communicators.hpp"

namespace cnn {

// Queued collectives count as done only once the stream has run them.
void cuda::StreamCommunicator::barrier() {
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
  world_.barrier();
}

// A few doubles a call (bn: 2C + 1), so one MPI_Allreduce; the copy back needs no wait, as later
// work on the stream is ordered after it and the next call synchronises before MPI writes the buffer.
void cuda::StreamCommunicator::allreduce_sum_doubles(double* data, std::int64_t count) {
  if (world_.size() == 1 || count == 0) return;
  if (count > std::numeric_limits<int>::max())
    throw Error(ExitCode::kFailure, "internal error: allreduce_sum_doubles of " + std::to_string(count) + " values");
  if (doubles_staging_.size() < count) {
    CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));  // the last copy out of the old buffer is done
    doubles_staging_.resize(count);
  }
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(double);
  CNN_CHECK_CUDA(cudaMemcpyAsync(doubles_staging_.get(), data, bytes, cudaMemcpyDeviceToHost, stream_));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
  world_.allreduce_sum(doubles_staging_.get(), static_cast<int>(count));
  CNN_CHECK_CUDA(cudaMemcpyAsync(data, doubles_staging_.get(), bytes, cudaMemcpyHostToDevice, stream_));
}

std::unique_ptr<Communicator> make_device_communicator(const MpiWorld& world, Backend& backend, AllreducePath path,
                                                       std::optional<int> peer_blocks) {
  const DeviceQueue* queue = backend.device_queue();
  if (queue == nullptr)
    throw Error(ExitCode::kFailure, "internal error: a device communicator needs the cuda backend, not " + backend.name());
  switch (path) {
    case AllreducePath::kMpi:
      return cuda::make_host_staged_communicator(world, queue->stream);
    case AllreducePath::kPeer:
      return cuda::make_peer_communicator(world, queue->device, queue->stream, queue->floats, 0, peer_blocks.value_or(0));
    case AllreducePath::kNccl:
#ifdef CNN_HAVE_NCCL
      return cuda::make_nccl_communicator(world, queue->device, queue->stream);
#else
      break;
#endif
    case AllreducePath::kAuto:
      break;
  }
  throw UsageError(std::string("--allreduce ") + allreduce_name(path) + ": not available in this build (available: " +
                   (device_nccl_available() ? "nccl, peer, mpi" : "peer, mpi") + ")");
}

AllreducePath device_allreduce_path(AllreducePath requested) {
  if (requested == AllreducePath::kMpi || requested == AllreducePath::kPeer) return requested;
  return device_nccl_available() ? AllreducePath::kNccl : AllreducePath::kMpi;
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
