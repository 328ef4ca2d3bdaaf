// The CUDA twin of cnn::first_nonfinite (include/cnn/nonfinite.hpp): the index of the first NaN or
// infinity in a device buffer, or -1. One pass, each block's minimum combined with an integer
// atomicMin (exact and order-independent; no float atomics); the last block to finish publishes the
// minimum and resets the running words, so a check needs no memset before it. The answer is read at
// once (first_nonfinite) or, by DeferredNonFiniteCheck, from pinned host memory the kernel wrote
// itself, when the trainer asks a step later: one kernel per step and no copy, so the step's stream
// carries as few operations as possible (each costs the GPU a few microseconds between kernels).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_check.hpp"
#include "dependent_launch.cuh"
#include "launch.hpp"
#include "nonfinite.cuh"

namespace cnn::cuda {

namespace {

// The running words of one check: the minimum so far over the blocks, and how many blocks are done.
// Between checks they hold {kAllFinite, 0}.
constexpr int kRunningWords = 2;

void reset_running_words(unsigned long long* running, cudaStream_t stream) {
  CNN_CHECK_CUDA(cudaMemsetAsync(running, 0xFF, sizeof(*running), stream));  // = kAllFinite
  CNN_CHECK_CUDA(cudaMemsetAsync(running + 1, 0, sizeof(*running), stream));
}

// result (and host_result, when not null) := the first non-finite index of data[0, count), or
// kAllFinite. `running` must hold {kAllFinite, 0}, and does again when the kernel ends.
__global__ void first_nonfinite_kernel(const float* data, std::int64_t count, unsigned long long* running /*[2]*/,
                                       unsigned long long* result, unsigned long long* host_result) {
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
  if (threadIdx.x != 0) return;
  if (block_min[0] != kAllFinite) atomicMin(&running[0], block_min[0]);
  __threadfence();  // this block's minimum is in before it counts itself done
  if (atomicAdd(&running[1], 1ULL) != gridDim.x - 1) return;
  // The last block: every other block's minimum is in (each fenced before counting itself).
  const unsigned long long first = atomicExch(&running[0], kAllFinite);
  running[1] = 0;
  *result = first;
  if (host_result != nullptr) *host_result = first;
}

void enqueue_first_nonfinite(const float* data, std::int64_t count, unsigned long long* running,
                             unsigned long long* result, unsigned long long* host_result, cudaStream_t stream) {
  const unsigned blocks = count > 0 ? grid_for(count) : 1u;  // an empty buffer still publishes kAllFinite
  launch_dependent(first_nonfinite_kernel, blocks, kBlockThreads, 0, stream, data, count, running, result,
                   host_result);
  CNN_CHECK_CUDA(cudaGetLastError());
}

std::int64_t as_index(unsigned long long word) { return word == kAllFinite ? -1 : static_cast<std::int64_t>(word); }

}  // namespace

std::int64_t first_nonfinite(const float* data, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return -1;
  unsigned long long* words = nullptr;  // the running words, then the result
  CNN_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&words), (kRunningWords + 1) * sizeof(*words), stream));
  reset_running_words(words, stream);
  enqueue_first_nonfinite(data, count, words, words + kRunningWords, nullptr, stream);
  unsigned long long host = kAllFinite;
  CNN_CHECK_CUDA(cudaMemcpyAsync(&host, words + kRunningWords, sizeof(host), cudaMemcpyDeviceToHost, stream));
  CNN_CHECK_CUDA(cudaFreeAsync(words, stream));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream));
  return as_index(host);
}

DeferredNonFiniteCheck::DeferredNonFiniteCheck(cudaStream_t stream) : flag_(1), running_(kRunningWords), readback_(1) {
  CNN_CHECK_CUDA(cudaMemsetAsync(flag_.get(), 0xFF, sizeof(unsigned long long), stream));  // = kAllFinite
  reset_running_words(running_.get(), stream);
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream));
  // cudaMallocHost memory is mapped into the device's address space (unified addressing); ask for
  // the device's name of it rather than assume it is the host pointer.
  CNN_CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&readback_on_device_), readback_.get(), 0));
  CNN_CHECK_CUDA(cudaEventCreateWithFlags(&checked_, cudaEventDisableTiming));
}

DeferredNonFiniteCheck::~DeferredNonFiniteCheck() {
  if (checked_ != nullptr) (void)cudaEventDestroy(checked_);
}

void DeferredNonFiniteCheck::enqueue(const float* data, std::int64_t count, cudaStream_t stream) {
  enqueue_first_nonfinite(data, count, running_.get(), flag_.get(), readback_on_device_, stream);
  CNN_CHECK_CUDA(cudaEventRecord(checked_, stream));
  enqueued_ = true;
}

std::int64_t DeferredNonFiniteCheck::result() {
  if (!enqueued_) return -1;
  CNN_CHECK_CUDA(cudaEventSynchronize(checked_));  // the kernel, and so its write to host memory, is done
  return as_index(*static_cast<volatile unsigned long long*>(readback_.get()));
}

}  // namespace cnn::cuda
