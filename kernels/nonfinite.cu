// The CUDA twin of cnn::first_nonfinite (include/cnn/nonfinite.hpp): the index of the first NaN or
// infinity in a device buffer, or -1. One pass, each block's minimum combined with an integer
// atomicMin (exact and order-independent; no float atomics), then one 8-byte readback.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_check.hpp"
#include "launch.hpp"
#include "nonfinite.cuh"

namespace cnn::cuda {

namespace {

constexpr unsigned long long kNone = ~0ULL;  // "no non-finite value": larger than any index

__global__ void first_nonfinite_kernel(const float* data, std::int64_t count, unsigned long long* result) {
  __shared__ unsigned long long block_min[kBlockThreads];
  unsigned long long mine = kNone;
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
  if (threadIdx.x == 0 && block_min[0] != kNone) atomicMin(result, block_min[0]);
}

}  // namespace

std::int64_t first_nonfinite(const float* data, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return -1;
  unsigned long long* result = nullptr;
  CNN_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&result), sizeof(*result), stream));
  CNN_CHECK_CUDA(cudaMemsetAsync(result, 0xFF, sizeof(*result), stream));  // = kNone
  first_nonfinite_kernel<<<grid_for(count), kBlockThreads, 0, stream>>>(data, count, result);
  CNN_CHECK_CUDA(cudaGetLastError());
  unsigned long long host = kNone;
  CNN_CHECK_CUDA(cudaMemcpyAsync(&host, result, sizeof(host), cudaMemcpyDeviceToHost, stream));
  CNN_CHECK_CUDA(cudaFreeAsync(result, stream));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream));
  return host == kNone ? -1 : static_cast<std::int64_t>(host);
}

}  // namespace cnn::cuda
