// bn's global statistics on the device (kernels/layers/bn.cu): the in-place sum over ranks of a bn
// layer's per-channel sums, doubles in device memory, in the order of the backend's stream. The
// trainer sets the communicator through Backend::set_statistics_communicator; without one (a single
// rank, --bn-local) nothing is exchanged. Two ways, told apart by the communicator:
//   - NCCL (Communicator::stream_ordered_doubles): an allreduce queued on the backend's stream, so the
//     training step, these sums included, stays one CUDA graph;
//   - any other (MPI through pinned host memory, the peer-memory path, a host communicator): the
//     stream's work so far is waited for, the sums cross to the host, go through MPI_Allreduce in
//     double and come back. The host takes part in the middle of the step, which no graph can hold,
//     so the backend then runs every training step eagerly (capturable() false).
// Either way every rank adds the same sums in the same order of calls, so N ranks normalise with the
// statistics one rank computes over the same global batch (to the rounding of the double sums).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cnn/communicator.hpp"
#include "cuda/device_buffer.hpp"

namespace cnn::cuda {

class StatisticsExchange {
 public:
  explicit StatisticsExchange(cudaStream_t stream) : stream_(stream) {}

  // ranks: null, or a world of one rank: no exchange. A device communicator must queue on `stream`
  // (make_communicator gives it the backend's).
  void set_ranks(Communicator* ranks);
  // There are other ranks whose sums each training step adds.
  bool active() const { return ranks_ != nullptr; }
  // A step that exchanges may be captured in a CUDA graph (true also when nothing is exchanged).
  bool capturable() const;
  // Collective when active(): every rank calls it with the same count, in the same order of calls.
  // sums: device memory, summed over the ranks in place. Nothing happens when not active().
  void allreduce_sum(double* sums, std::int64_t count);
  // For the settings block: how the sums travel, and what that means for the step's graph.
  std::string description(bool graphs) const;

 private:
  Communicator* ranks_ = nullptr;
  cudaStream_t stream_;
  PinnedBuffer<double> staging_;  // a host communicator's copy of the sums
};

}  // namespace cnn::cuda
