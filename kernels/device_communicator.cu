// make_device_communicator: NCCL or MPI through host staging, by name; which one a run starts with;
// and what the two share.
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
  auto* cuda_backend = dynamic_cast<cuda::DeviceBackend*>(&backend);
  if (cuda_backend == nullptr)
    throw Error(ExitCode::kFailure, "internal error: a device communicator needs the cuda backend, not " + backend.name());
  if (path == "mpi") return cuda::make_host_staged_communicator(world, *cuda_backend);
#ifdef CNN_HAVE_NCCL
  if (path == "nccl") return cuda::make_nccl_communicator(world, *cuda_backend);
#endif
  throw UsageError("--allreduce " + path + ": not available in this build (available: " +
                   (device_nccl_available() ? "nccl, mpi" : "mpi") + ")");
}

std::string device_allreduce_path(const std::string& requested) {
  return requested != "mpi" && device_nccl_available() ? "nccl" : "mpi";
}

bool device_nccl_available() {
#ifdef CNN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

}  // namespace cnn
