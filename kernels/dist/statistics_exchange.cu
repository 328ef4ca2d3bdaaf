// StatisticsExchange: see statistics_exchange.hpp.
#include "dist/statistics_exchange.hpp"

#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"

namespace cnn::cuda {

void StatisticsExchange::set_ranks(Communicator* ranks) {
  ranks_ = ranks != nullptr && ranks->size() > 1 ? ranks : nullptr;
}

bool StatisticsExchange::capturable() const {
  return ranks_ == nullptr || (ranks_->memory_space() == MemorySpace::kDevice && ranks_->stream_ordered_doubles());
}

void StatisticsExchange::allreduce_sum(double* sums, std::int64_t count) {
  if (ranks_ == nullptr || count == 0) return;
  if (!capturable()) {
    // The way through the host waits for the stream: inside a capture that would end it with an error
    // far from here. The backend never captures such a step (DeviceBackend::set_statistics_communicator).
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CNN_CHECK_CUDA(cudaStreamIsCapturing(stream_, &capture));
    if (capture != cudaStreamCaptureStatusNone)
      throw Error(ExitCode::kFailure, "internal error: bn's statistics through " + ranks_->name() +
                                          " inside a captured step HINT: rerun with CNN_CUDA_GRAPHS=0 and report this");
  }
  if (ranks_->memory_space() == MemorySpace::kDevice) {
    ranks_->allreduce_sum_doubles(sums, count);  // queued on stream_ (NCCL), or staged by the communicator
    return;
  }
  // A host communicator: through pinned memory here. The copy back needs no wait (the stream orders
  // the work after it, and the next call waits before the host writes the buffer again).
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(double);
  if (staging_.size() < count) {
    CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
    staging_.resize(count);
  }
  CNN_CHECK_CUDA(cudaMemcpyAsync(staging_.get(), sums, bytes, cudaMemcpyDeviceToHost, stream_));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
  ranks_->allreduce_sum_doubles(staging_.get(), count);
  CNN_CHECK_CUDA(cudaMemcpyAsync(sums, staging_.get(), bytes, cudaMemcpyHostToDevice, stream_));
}

std::string StatisticsExchange::description(bool graphs) const {
  if (ranks_ == nullptr) return "";
  if (capturable())
    return "the per-channel sums allreduced in double by " + ranks_->name() + " on the compute stream, " +
           (graphs ? "inside the step's CUDA graph" : "in eager steps (CUDA graphs off)");
  return "the per-channel sums through pinned host memory and MPI_Allreduce in double, so every training step "
         "runs eagerly, without a CUDA graph (NCCL would keep the graph)";
}

}  // namespace cnn::cuda
