// The CUDA twin of cnn::first_nonfinite (include/cnn/nonfinite.hpp): the index of the first NaN or
// infinity in a device buffer, or -1. One pass, each block's minimum combined with an integer
// atomicMin (exact and order-independent; no float atomics), then one 8-byte readback: at once
// (first_nonfinite) or when the trainer asks a step later (DeferredNonFiniteCheck).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_check.hpp"
#include "dependent_launch.cuh"
#include "launch.hpp"
#include "nonfinite.cuh"

namespace cnn::cuda {

namespace {

__global__ void first_nonfinite_kernel(const float* data, std::int64_t count, unsigned long long* result) {
  start_after_previous_kernel();
  __shared__ unsigned long long block_min[kBlockThreads];
  unsigned long long mine = kAllFinite;
  // A grid-stride loop visits increasing indices, so the first hit is this thread's minimum.
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (!isfinite(data[i])) {
      mine = static_cast<unsigned long long>(i);
      break;
    }
  }
  block_min[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride && block_min[threadIdx.x + stride] < block_min[threadIdx.x])
      block_min[threadIdx.x] = block_min[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0 && block_min[0] != kAllFinite) atomicMin(result, block_min[0]);
}

// Sets *result to the first non-finite index of data[0, count), or kAllFinite.
void enqueue_first_nonfinite(const float* data, std::int64_t count, unsigned long long* result, cudaStream_t stream) {
  CNN_CHECK_CUDA(cudaMemsetAsync(result, 0xFF, sizeof(*result), stream));  // = kAllFinite
  if (count <= 0) return;
  launch_dependent(first_nonfinite_kernel, grid_for(count), kBlockThreads, 0, stream, data, count, result);
  CNN_CHECK_CUDA(cudaGetLastError());
}

std::int64_t as_index(unsigned long long word) { return word == kAllFinite ? -1 : static_cast<std::int64_t>(word); }

}  // namespace

std::int64_t first_nonfinite(const float* data, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return -1;
  unsigned long long* result = nullptr;
  CNN_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&result), sizeof(*result), stream));
  enqueue_first_nonfinite(data, count, result, stream);
  unsigned long long host = kAllFinite;
  CNN_CHECK_CUDA(cudaMemcpyAsync(&host, result, sizeof(host), cudaMemcpyDeviceToHost, stream));
  CNN_CHECK_CUDA(cudaFreeAsync(result, stream));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream));
  return as_index(host);
}

DeferredNonFiniteCheck::DeferredNonFiniteCheck(cudaStream_t stream) : flag_(1), readback_(1) {
  CNN_CHECK_CUDA(cudaMemsetAsync(flag_.get(), 0xFF, sizeof(unsigned long long), stream));  // = kAllFinite
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream));
  CNN_CHECK_CUDA(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
}

DeferredNonFiniteCheck::~DeferredNonFiniteCheck() {
  if (copied_ != nullptr) (void)cudaEventDestroy(copied_);
}

void DeferredNonFiniteCheck::enqueue(const float* data, std::int64_t count, cudaStream_t stream) {
  enqueue_first_nonfinite(data, count, flag_.get(), stream);
  CNN_CHECK_CUDA(cudaMemcpyAsync(readback_.get(), flag_.get(), sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                 stream));
  CNN_CHECK_CUDA(cudaEventRecord(copied_, stream));
  enqueued_ = true;
}

std::int64_t DeferredNonFiniteCheck::result() {
  if (!enqueued_) return -1;
  CNN_CHECK_CUDA(cudaEventSynchronize(copied_));
  return as_index(*readback_.get());
}

}  // namespace cnn::cuda
