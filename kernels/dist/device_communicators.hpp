// Communicators for gradients in device memory. All queue their work on the backend's stream
// (Backend::device_queue()), so the allreduce is ordered after the step that wrote the gradients and
// before the update that reads them, with no extra synchronisation.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cnn/communicator.hpp"
#include "cuda/device_buffer.hpp"

namespace cnn::cuda {

// What both device communicators share: the world they reduce over and the backend's stream their
// work is queued on. A barrier must also wait for that queued work.
class StreamCommunicator : public Communicator {
 public:
  StreamCommunicator(const MpiWorld& world, cudaStream_t stream) : world_(world), stream_(stream) {}
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  // bn's per-channel sums (device memory), through pinned host memory and MPI_Allreduce in double:
  // waits for the stream's work so far, so it cannot be captured (stream_ordered_doubles() false).
  // NCCL overrides it with a stream-ordered allreduce.
  void allreduce_sum_doubles(double* data, std::int64_t count) override;
  void barrier() override;
  int rank() const override { return world_.rank(); }
  int size() const override { return world_.size(); }
  int local_rank() const override { return world_.local_rank(); }

 protected:
  const MpiWorld& world_;
  cudaStream_t stream_;

 private:
  PinnedBuffer<double> doubles_staging_;
};

// The stream-ordered communicators (NCCL, peer): allreduce_sum queues on the backend's stream; the
// overlapped step's allreduces go on a second stream forked from and joined back to it with events
// (side_stream_communicator.cu), so the step, communication included, can be captured as one CUDA
// graph; a step whose only allreduce comes after the whole backward queues it on the backend's
// stream. Derived classes only queue one allreduce, and call drain() first in their destructor.
class SideStreamCommunicator : public StreamCommunicator {
 public:
  using StreamCommunicator::StreamCommunicator;
  ~SideStreamCommunicator() override;
  void allreduce_sum(float* data, std::int64_t count) override;
  bool stream_ordered() const override { return true; }
  void start_allreduce_sum(float* data, std::int64_t count) override;
  void finish_allreduce_sum(float* data, std::int64_t count) override;
  void wait_all() override;
  AsyncAllreduceTimes take_async_times() override;

 protected:
  // Queues the in-place sum over ranks of [data, data + count) on `stream` (world size > 1, count > 0).
  virtual void queue_allreduce(float* data, std::int64_t count, cudaStream_t stream) = 0;
  // queue_allreduce, recorded by the flight recorder: derived classes never call it otherwise.
  void queue_recorded(float* data, std::int64_t count, cudaStream_t stream);
  // Waits for the second stream's work; derived destructors call it before freeing what that work uses.
  void drain() noexcept;

 private:
  struct Probe {
    cudaEvent_t events[4] = {nullptr, nullptr, nullptr, nullptr};  // comm start, comm end, compute end, join
    bool used = false;
  };
  // Probes are kept until take_async_times() (once per epoch); beyond this many, the oldest is reused.
  static constexpr std::size_t kMaxProbes = 64;

  static double seconds_between(cudaEvent_t a, cudaEvent_t b);
  bool capturing() const;
  void ensure_comm_stream();
  Probe& probe();

  cudaStream_t comm_stream_ = nullptr;
  std::vector<cudaEvent_t> fork_events_;
  cudaEvent_t join_ = nullptr;
  std::vector<Probe> probes_;
  std::size_t probe_next_ = 0;
  int starts_ = 0;
  bool probing_ = false;
};

#ifdef CNN_HAVE_NCCL
// ncclAllReduce / ncclBroadcast on `stream` (of GPU `device`); the unique id goes from rank 0 to all
// over MPI_Bcast. Collective.
std::unique_ptr<Communicator> make_nccl_communicator(const MpiWorld& world, int device, cudaStream_t stream);
#endif

// Why this world cannot reduce through peer memory (peer_communicator.cu), or "" when it can: every
// rank on one node, each on its own GPU, every pair of GPUs with peer access, at most kPeerMaxRanks
// ranks. Collective: every rank calls it and gets the same answer.
std::string peer_allreduce_unavailable(const MpiWorld& world, int device);

// An allreduce in peer memory over NVLink/PCIe (peer_allreduce.cuh), summing the ranks in rank
// order, so every rank gets the same bits, whatever the bucket plan. `capacity` floats at most per
// allreduce. shots: 1 or 2 forces one-shot or two-shot; 0 times both at set-up and takes two-shot
// from the size where it is faster. Collective; throws UsageError when peer_allreduce_unavailable
// says why. blocks: the kernel's grid (the knob CNN_PEER_BLOCKS, for measurements; the same on every
// rank), clamped to [1, kPeerMaxBlocks]; 0: the default.
std::unique_ptr<Communicator> make_peer_communicator(const MpiWorld& world, int device, cudaStream_t stream,
                                                     std::int64_t capacity, int shots = 0, int blocks = 0);

// Copies device -> pinned host buffer, MPI_Allreduce in place, copies back, all on `stream`. For
// builds without NCCL.
std::unique_ptr<Communicator> make_host_staged_communicator(const MpiWorld& world, cudaStream_t stream);

}  // namespace cnn::cuda
