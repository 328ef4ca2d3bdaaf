// make_device_communicator: NCCL when the build has it, otherwise MPI through host staging.
#include "cnn/cuda_backend.hpp"
#include "cnn/errors.hpp"
#include "device_communicators.hpp"

namespace cnn {

std::unique_ptr<Communicator> make_device_communicator(const MpiWorld& world, Backend& backend) {
  auto* cuda_backend = dynamic_cast<cuda::CudaBackend*>(&backend);
  if (cuda_backend == nullptr)
    throw Error(ExitCode::kFailure, "internal error: a device communicator needs the cuda backend, not " + backend.name());
#ifdef CNN_HAVE_NCCL
  return cuda::make_nccl_communicator(world, *cuda_backend);
#else
  return cuda::make_host_staged_communicator(world, *cuda_backend);
#endif
}

}  // namespace cnn
