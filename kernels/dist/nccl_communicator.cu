// NcclCommunicator: gradient allreduce between GPUs with NCCL, on the backend's stream (the
// overlapped step's second stream: SideStreamCommunicator).
#ifdef CNN_HAVE_NCCL

#include <nccl.h>

#include <string>

#include "cnn/flight_recorder.hpp"
#include "cuda/cuda_check.hpp"
#include "dist/device_communicators.hpp"

namespace cnn::cuda {
namespace {

class NcclCommunicator final : public SideStreamCommunicator {
 public:
  NcclCommunicator(const MpiWorld& world, int device, cudaStream_t stream) : SideStreamCommunicator(world, stream) {
    // Rank 0 makes the id; every rank needs the same one before ncclCommInitRank, which blocks until
    // all ranks have joined.
    ncclUniqueId id{};
    if (world.rank() == 0) CNN_CHECK_NCCL(ncclGetUniqueId(&id));
    world.broadcast(&id, sizeof(id), 0);
    CNN_CHECK_CUDA(cudaSetDevice(device));
    CNN_CHECK_NCCL(ncclCommInitRank(&comm_, world.size(), id, world.rank()));
    int version = 0;
    CNN_CHECK_NCCL(ncclGetVersion(&version));
    name_ = "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
            std::to_string(version % 100) + " (device memory)";
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  // Destroy after every CUDA graph that captured this communicator's collectives (the backend's
  // overlapped step graphs): ncclCommDestroy waits until those graphs are gone.
  ~NcclCommunicator() override {
    drain();
    if (comm_ != nullptr) (void)ncclCommDestroy(comm_);  // cannot throw from here
  }

  std::string name() const override { return name_; }

  // bn's per-channel sums, queued on the backend's stream like the plain allreduce: a captured step
  // may hold it. NCCL runs one communicator's collectives in the order they are issued, whatever
  // their streams, so the overlapped step's gradient buckets (second stream) and these sums (the
  // backend's) meet in the same order on every rank.
  // One flight record each, as the gradient's allreduces (recorded at each replay when captured).
  void allreduce_sum_doubles(double* data, std::int64_t count) override {
    if (world_.size() == 1 || count == 0) return;
    const std::int64_t bytes = count * static_cast<std::int64_t>(sizeof(double));
    recorded_queued_collective(CollectiveOp::kDeviceAllreduce, bytes, [&] {
      CNN_CHECK_NCCL(ncclAllReduce(data, data, static_cast<std::size_t>(count), ncclDouble, ncclSum, comm_, stream_));
    });
  }
  bool stream_ordered_doubles() const override { return true; }

  void broadcast(float* data, std::int64_t count, int root) override {
    if (world_.size() == 1 || count == 0) return;
    recorded_queued_collective(CollectiveOp::kDeviceBroadcast, count * static_cast<std::int64_t>(sizeof(float)), [&] {
      CNN_CHECK_NCCL(ncclBroadcast(data, data, static_cast<std::size_t>(count), ncclFloat, root, comm_, stream_));
    });
  }

 private:
  void queue_allreduce(float* data, std::int64_t count, cudaStream_t stream) override {
    CNN_CHECK_NCCL(ncclAllReduce(data, data, static_cast<std::size_t>(count), ncclFloat, ncclSum, comm_, stream));
  }

  ncclComm_t comm_ = nullptr;
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const MpiWorld& world, int device, cudaStream_t stream) {
  return std::make_unique<NcclCommunicator>(world, device, stream);
}

}  // namespace cnn::cuda

#endif  // CNN_HAVE_NCCL
