// Temporary device memory tied to a stream: cudaMallocAsync / cudaFreeAsync through the device's
// default memory pool. It is ordered with the kernels that use it, it can be captured into a CUDA
// graph (as allocation nodes), and once the pool has grown it costs no cudaMalloc.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/cuda_check.hpp"

namespace cnn::cuda {

template <class T>
class StreamScratch {
 public:
  StreamScratch(std::int64_t count, cudaStream_t stream) : stream_(stream) {
    if (count > 0) CNN_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&data_),
                                                  static_cast<std::size_t>(count) * sizeof(T), stream_));
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  // Errors cannot leave a destructor; the normal path frees through release(), which checks.
  ~StreamScratch() {
    if (data_ != nullptr) (void)cudaFreeAsync(data_, stream_);
  }

  T* get() const { return data_; }
  // Frees after the work queued so far on the stream.
  void release() {
    if (data_ != nullptr) CNN_CHECK_CUDA(cudaFreeAsync(data_, stream_));
    data_ = nullptr;
  }

 private:
  T* data_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace cnn::cuda
