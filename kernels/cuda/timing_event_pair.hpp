// Two CUDA events around a piece of stream work, created on first use and freed with the owner, and
// whether the pair holds a measurement not yet read.
#pragma once

#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"

namespace cnn::cuda {

class TimingEventPair {
 public:
  TimingEventPair() = default;
  TimingEventPair(const TimingEventPair&) = delete;
  TimingEventPair& operator=(const TimingEventPair&) = delete;
  ~TimingEventPair() {
    if (start_ != nullptr) (void)cudaEventDestroy(start_);
    if (end_ != nullptr) (void)cudaEventDestroy(end_);
  }

  void start(cudaStream_t stream) {
    if (start_ == nullptr) {
      CNN_CHECK_CUDA(cudaEventCreate(&start_));
      CNN_CHECK_CUDA(cudaEventCreate(&end_));
    }
    CNN_CHECK_CUDA(cudaEventRecord(start_, stream));
  }
  void end(cudaStream_t stream) {
    CNN_CHECK_CUDA(cudaEventRecord(end_, stream));
    measured_ = true;
  }
  bool measured() const { return measured_; }
  // Waits for the end event; the seconds between the two.
  double seconds() const {
    CNN_CHECK_CUDA(cudaEventSynchronize(end_));
    float ms = 0.0f;
    CNN_CHECK_CUDA(cudaEventElapsedTime(&ms, start_, end_));
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
  bool measured_ = false;
};

}  // namespace cnn::cuda
