// The CUDA backend and the communicators for device memory. Only meaningful when the build has CUDA
// (CNN_HAVE_CUDA); the generic factories make_backend / make_communicator (src/) call these.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/communicator.hpp"
#include "cnn/network.hpp"
#include "cnn/op_plan.hpp"

namespace cnn {

// Visible CUDA devices (CUDA_VISIBLE_DEVICES applies); 0 when there is no driver or no device.
// Never throws.
int cuda_device_count();

// The `cuda` backend on GPU options.local_rank % cuda_device_count(), running the ops
// plan_ops(network, FusionTarget::kCuda) picks (the seed model: its one fused op). Throws Error with a
// HINT when no device is usable, and UsageError for a network the kernels do not support.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options, const Network& network);
// The same backend running `ops`, another plan of the same network (plan_ops for another target, say):
// for tests that hold a fused op against the layer ops it replaces. UsageError for an op the CUDA
// kernels do not have or a fused op where its kernels do not fit.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options, const Network& network,
                                           const std::vector<Op>& ops);

// Allreduce of device buffers for a backend made by make_cuda_backend, on the GPU and stream of its
// device_queue(), by path: "nccl" (NCCL on the backend's stream; UsageError in a build without NCCL),
// "peer" (one kernel through the other GPUs' memory, summing in rank order; UsageError where
// device_peer_unavailable says why) or "mpi" (MPI_Allreduce through pinned host memory). Collective.
std::unique_ptr<Communicator> make_device_communicator(const MpiWorld& world, Backend& backend, const std::string& path);
// The path device ranks start with for --allreduce `requested` (auto, nccl, peer or mpi): the one
// asked for (MPI through host memory also serves two ranks on one GPU, which NCCL refuses),
// otherwise NCCL when the build has it; the scaling advisor may then switch.
std::string device_allreduce_path(const std::string& requested);
// Why the "peer" path cannot serve this world (ranks on several nodes, two ranks on one GPU, GPUs
// without peer access, too many ranks), or "" when it can. Collective: same answer on every rank.
std::string device_peer_unavailable(const MpiWorld& world, Backend& backend);
// Whether this build has NCCL.
bool device_nccl_available();

}  // namespace cnn
