// HostStagedCommunicator: gradient allreduce for GPUs without NCCL. The device buffer goes to pinned
// host memory, through MPI_Allreduce, and back, all ordered on the backend's stream.
#include <algorithm>
#include <climits>

#include "cnn/flight_recorder.hpp"
#include "cnn/mpi_check.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_buffer.hpp"
#include "dist/device_communicators.hpp"

namespace cnn::cuda {
namespace {

// MPI counts are int.
constexpr std::int64_t kMaxMpiCount = INT_MAX;

class HostStagedCommunicator final : public StreamCommunicator {
 public:
  HostStagedCommunicator(const MpiWorld& world, cudaStream_t stream) : StreamCommunicator(world, stream) {}

  std::string name() const override { return "MPI_Allreduce via pinned host memory (device memory)"; }

  void allreduce_sum(float* data, std::int64_t count) override {
    if (world_.size() == 1 || count == 0) return;
    to_host(data, count);
    recorded_collective(CollectiveOp::kAllreduce, count * static_cast<std::int64_t>(sizeof(float)), [&] {
      for (std::int64_t done = 0; done < count; done += kMaxMpiCount) {
        const int part = static_cast<int>(std::min(kMaxMpiCount, count - done));
        CNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, staging_.get() + done, part, MPI_FLOAT, MPI_SUM, world_.comm()));
      }
    });
    to_device(data, count);
  }

  void broadcast(float* data, std::int64_t count, int root) override {
    if (world_.size() == 1 || count == 0) return;
    if (world_.rank() == root) {
      to_host(data, count);
    } else {
      // MPI writes the staging buffer from the host: the last copy out of it must be done.
      CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
      if (staging_.size() < count) staging_.resize(count);
    }
    world_.broadcast(staging_.get(), count * static_cast<std::int64_t>(sizeof(float)), root);
    to_device(data, count);
  }

 private:
  // Waits for the copy: MPI reads the host buffer next.
  void to_host(const float* data, std::int64_t count) {
    if (staging_.size() < count) staging_.resize(count);
    CNN_CHECK_CUDA(cudaMemcpyAsync(staging_.get(), data, static_cast<std::size_t>(count) * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream_));
    CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
  }
  // No wait: later work on the stream is ordered after the copy, and the next to_host (the only
  // writer of the staging buffer) synchronises the stream before MPI touches it again.
  void to_device(float* data, std::int64_t count) {
    CNN_CHECK_CUDA(cudaMemcpyAsync(data, staging_.get(), static_cast<std::size_t>(count) * sizeof(float),
                                   cudaMemcpyHostToDevice, stream_));
  }

  PinnedBuffer<float> staging_;
};

}  // namespace

std::unique_ptr<Communicator> make_host_staged_communicator(const MpiWorld& world, cudaStream_t stream) {
  return std::make_unique<HostStagedCommunicator>(world, stream);
}

}  // namespace cnn::cuda
