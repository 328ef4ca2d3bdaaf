// The CUDA backend and the communicators for device memory. Only meaningful when the build has CUDA
// (CNN_HAVE_CUDA); the generic factories make_backend / make_communicator (src/) call these.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/choices.hpp"
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
// device_queue(), by path: kNccl (NCCL on the backend's stream; UsageError in a build without NCCL),
// kPeer (one kernel through the other GPUs' memory, summing in rank order; UsageError where
// device_peer_unavailable says why) or kMpi (MPI_Allreduce through pinned host memory). Collective.
// peer_blocks: the knob CNN_PEER_BLOCKS (knobs.hpp), the peer kernel's grid; unset: its own choice.
std::unique_ptr<Communicator> make_device_communicator(const MpiWorld& world, Backend& backend, AllreducePath path,
                                                       std::optional<int> peer_blocks = std::nullopt);
// The path device ranks start with for --allreduce `requested`: the one asked for (MPI through host
// memory also serves two ranks on one GPU, which NCCL refuses), otherwise (auto, or nccl in a build
// without it) NCCL when the build has it, else MPI; the scaling advisor may then switch.
AllreducePath device_allreduce_path(AllreducePath requested);
// Why the "peer" path cannot serve this world (ranks on several nodes, two ranks on one GPU, GPUs
// without peer access, too many ranks), or "" when it can. Collective: same answer on every rank.
std::string device_peer_unavailable(const MpiWorld& world, Backend& backend);
// Whether this build has NCCL.
bool device_nccl_available();

}  // namespace cnn
