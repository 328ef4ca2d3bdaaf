// PeerCommunicator: the gradient allreduce through peer memory (peer_allreduce.cuh) in a PeerArea
// (peer_area.hpp) of its own; the allreduce is one kernel on the stream, with no host involvement, so
// CUDA graphs capture it like any kernel. Which variant serves which size (one-shot below, two-shot from) is measured at
// set-up on the buffer's own sizes.
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cnn/errors.hpp"
#include "cnn/flight_recorder.hpp"
#include "cnn/mpi_check.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_buffer.hpp"
#include "dist/device_communicators.hpp"
#include "dist/peer_allreduce.cuh"

namespace cnn::cuda {

std::string peer_allreduce_unavailable(const MpiWorld& world, int device) {
  const int n = world.size();
  if (n > kPeerMaxRanks) return "more than " + std::to_string(kPeerMaxRanks) + " ranks";
  // One node: MPI's shared-memory split (local_size) holds every rank. Then each rank on a GPU of
  // its own that this one can reach.
  int problem = world.local_size() != n ? 1 : 0;  // 1: several nodes, 2: a shared GPU, 3: no peer access
  std::vector<int> devices(static_cast<std::size_t>(n));
  recorded_collective(CollectiveOp::kAllgather, sizeof(int), [&] {
    CNN_CHECK_MPI(MPI_Allgather(&device, 1, MPI_INT, devices.data(), 1, MPI_INT, world.comm()));
  });
  for (int q = 0; q < n && problem == 0; ++q) {
    const int other = devices[static_cast<std::size_t>(q)];
    if (q == world.rank()) continue;
    if (other == device) {
      problem = 2;
    } else {
      int can = 0;
      CNN_CHECK_CUDA(cudaDeviceCanAccessPeer(&can, device, other));
      if (!can) problem = 3;
    }
  }
  switch (world.allreduce_max(problem)) {
    case 1: return "the ranks span more than one node";
    case 2: return "two ranks share a GPU";
    case 3: return "a pair of GPUs has no peer access";
    default: return "";
  }
}

namespace {

class PeerCommunicator final : public SideStreamCommunicator {
 public:
  PeerCommunicator(const MpiWorld& world, int device, cudaStream_t stream, std::int64_t capacity, int shots, int blocks)
      : SideStreamCommunicator(world, stream), capacity_(capacity), area_(world, device, capacity) {
    if (blocks != 0) blocks_ = std::clamp(blocks, 1, kPeerMaxBlocks);
    if (shots == 1) two_shot_from_ = capacity_ + 1;
    else if (shots == 2) two_shot_from_ = 0;
    else choose_variant();
  }
  PeerCommunicator(const PeerCommunicator&) = delete;
  PeerCommunicator& operator=(const PeerCommunicator&) = delete;
  // Not stream_: it is the backend's, which may be gone (the backend goes first: its graphs hold this
  // communicator's kernels). The area goes after the second stream's work.
  ~PeerCommunicator() override { drain(); }

  std::string name() const override {
    const std::string variant =
        two_shot_from_ > capacity_ ? "one-shot"
        : two_shot_from_ == 0      ? "two-shot"
                                   : "two-shot from " + std::to_string(two_shot_from_ * static_cast<std::int64_t>(sizeof(float)) / 1000) + " kB";
    return "peer memory over NVLink/PCIe, " + std::to_string(blocks_) + " blocks, " + variant + " (device memory)";
  }

  // Once per run (the initial parameters): through host memory, exact.
  void broadcast(float* data, std::int64_t count, int root) override {
    if (world_.size() == 1 || count == 0) return;
    PinnedBuffer<float> host(count);
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
    if (world_.rank() == root) CNN_CHECK_CUDA(cudaMemcpyAsync(host.get(), data, bytes, cudaMemcpyDeviceToHost, stream_));
    CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
    world_.broadcast(host.get(), static_cast<std::int64_t>(bytes), root);
    CNN_CHECK_CUDA(cudaMemcpyAsync(data, host.get(), bytes, cudaMemcpyHostToDevice, stream_));
    CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));  // `host` goes away on return
  }

 private:
  void queue_allreduce(float* data, std::int64_t count, cudaStream_t stream) override {
    if (count > capacity_)
      throw Error(ExitCode::kFailure, "internal error: peer allreduce of " + std::to_string(count) +
                                          " floats, more than the " + std::to_string(capacity_) + " it was set up for");
    launch(data, count, stream, count >= two_shot_from_);
  }

  void launch(float* data, std::int64_t count, cudaStream_t stream, bool two_shot) {
    using Kernel = void (*)(PeerView, float*, std::int64_t);
    const bool aligned = reinterpret_cast<std::uintptr_t>(data) % 16 == 0;
    const Kernel kernel = aligned ? (two_shot ? peer_allreduce_kernel<4, true> : peer_allreduce_kernel<4, false>)
                                  : (two_shot ? peer_allreduce_kernel<1, true> : peer_allreduce_kernel<1, false>);
    launch_dependent(kernel, blocks_, kPeerThreads, 0, stream, area_.view(), data, count);
    CNN_CHECK_CUDA(cudaGetLastError());
  }

  // Times both variants, back to back on the stream, at 1/64, 1/8 and all of the capacity (the
  // buckets the overlap planner may ask for lie between); two-shot serves sizes from the smallest
  // where it was faster on the slowest rank, and stayed faster up to the capacity. Rank 0's choice
  // holds everywhere.
  void choose_variant() {
    constexpr int kWarmup = 3, kRepeats = 20;
    DeviceBuffer<float> scratch(capacity_);
    CNN_CHECK_CUDA(cudaMemsetAsync(scratch.get(), 0, static_cast<std::size_t>(capacity_) * sizeof(float), stream_));
    cudaEvent_t start = nullptr, stop = nullptr;
    CNN_CHECK_CUDA(cudaEventCreate(&start));
    CNN_CHECK_CUDA(cudaEventCreate(&stop));
    const auto seconds_per_allreduce = [&](std::int64_t count, bool two_shot) {
      for (int r = 0; r < kWarmup; ++r) launch(scratch.get(), count, stream_, two_shot);
      CNN_CHECK_CUDA(cudaEventRecord(start, stream_));
      for (int r = 0; r < kRepeats; ++r) launch(scratch.get(), count, stream_, two_shot);
      CNN_CHECK_CUDA(cudaEventRecord(stop, stream_));
      CNN_CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0.0f;
      CNN_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      return world_.allreduce_max(static_cast<double>(ms) * 1e-3 / kRepeats);
    };
    two_shot_from_ = capacity_ + 1;  // none
    for (std::int64_t count : {std::max<std::int64_t>(capacity_ / 64, 1), std::max<std::int64_t>(capacity_ / 8, 1), capacity_}) {
      const double one_shot = seconds_per_allreduce(count, false);
      if (seconds_per_allreduce(count, true) >= one_shot) two_shot_from_ = capacity_ + 1;
      else if (two_shot_from_ > capacity_) two_shot_from_ = count;
    }
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    world_.broadcast(&two_shot_from_, sizeof(two_shot_from_));
  }

  std::int64_t capacity_;
  PeerArea area_;
  int blocks_ = kPeerDefaultBlocks;
  std::int64_t two_shot_from_ = 0;  // floats
};

}  // namespace

std::unique_ptr<Communicator> make_peer_communicator(const MpiWorld& world, int device, cudaStream_t stream,
                                                     std::int64_t capacity, int shots, int blocks) {
  const std::string why = peer_allreduce_unavailable(world, device);
  if (!why.empty()) throw UsageError("--allreduce peer: not available here: " + why);
  return std::make_unique<PeerCommunicator>(world, device, stream, capacity, shots, blocks);
}

}  // namespace cnn::cuda
