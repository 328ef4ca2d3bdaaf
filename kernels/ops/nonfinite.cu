// The CUDA twin of cnn::first_nonfinite (include/cnn/nonfinite.hpp): the index of the first NaN or
// infinity in a device buffer, or -1. One pass, each block's minimum combined with an integer
// atomicMin (exact and order-independent; no float atomics); the last block to finish publishes the
// minimum and resets the running words, so a check needs no memset before it. The answer is read at
// once (first_nonfinite) or, by DeferredNonFiniteCheck, from pinned host memory the kernel wrote
// itself, when the trainer asks a step later: one kernel per step and no copy, so the step's stream
// carries as few operations as possible (each costs the GPU a few microseconds between kernels).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "ops/nonfinite.cuh"

namespace cnn::cuda {

namespace {

// The device words of one check: the minimum so far over the blocks and how many blocks are done
// (between checks {kAllFinite, 0}), then the published result.
enum CheckWord : int { kRunningMin, kBlocksDone, kResult, kCheckWords };

// {kAllFinite, 0, kAllFinite}: ready for a check, and no step flagged yet.
void reset_check_words(unsigned long long* words, cudaStream_t stream) {
  CNN_CHECK_CUDA(cudaMemsetAsync(words, 0xFF, kCheckWords * sizeof(*words), stream));
  CNN_CHECK_CUDA(cudaMemsetAsync(words + kBlocksDone, 0, sizeof(*words), stream));
}

// words[kResult] (and *host_result, when not null) := the first non-finite index of data[0, count),
// or kAllFinite. The running words must hold {kAllFinite, 0}, and do again when the kernel ends.
__global__ void first_nonfinite_kernel(const float* data, std::int64_t count, unsigned long long* words,
                                       unsigned long long* host_result) {
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
  if (block_min[0] != kAllFinite) atomicMin(&words[kRunningMin], block_min[0]);
  __threadfence();  // this block's minimum is in before it counts itself done
  if (atomicAdd(&words[kBlocksDone], 1ULL) != gridDim.x - 1) return;
  // The last block: every other block's minimum is in (each fenced before counting itself).
  const unsigned long long first = atomicExch(&words[kRunningMin], kAllFinite);
  words[kBlocksDone] = 0;
  words[kResult] = first;
  if (host_result != nullptr) *host_result = first;
}

void enqueue_first_nonfinite(const float* data, std::int64_t count, unsigned long long* words,
                             unsigned long long* host_result, cudaStream_t stream) {
  const unsigned blocks = count > 0 ? grid_for(count) : 1u;  // an empty buffer still publishes kAllFinite
  launch_dependent(first_nonfinite_kernel, blocks, kBlockThreads, 0, stream, data, count, words, host_result);
  CNN_CHECK_CUDA(cudaGetLastError());
}

std::int64_t as_index(unsigned long long word) { return word == kAllFinite ? -1 : static_cast<std::int64_t>(word); }

}  // namespace

std::int64_t first_nonfinite(const float* data, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return -1;
  unsigned long long* words = nullptr;
  CNN_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&words), kCheckWords * sizeof(*words), stream));
  reset_check_words(words, stream);
  enqueue_first_nonfinite(data, count, words, nullptr, stream);
  unsigned long long host = kAllFinite;
  CNN_CHECK_CUDA(cudaMemcpyAsync(&host, words + kResult, sizeof(host), cudaMemcpyDeviceToHost, stream));
  CNN_CHECK_CUDA(cudaFreeAsync(words, stream));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream));
  return as_index(host);
}

DeferredNonFiniteCheck::DeferredNonFiniteCheck(cudaStream_t stream) : words_(kCheckWords), readback_(1) {
  reset_check_words(words_.get(), stream);
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
  enqueue_first_nonfinite(data, count, words_.get(), readback_on_device_, stream);
  CNN_CHECK_CUDA(cudaEventRecord(checked_, stream));
  enqueued_ = true;
}

const unsigned long long* DeferredNonFiniteCheck::skip_flag() const { return words_.get() + kResult; }

std::int64_t DeferredNonFiniteCheck::result() {
  if (!enqueued_) return -1;
  CNN_CHECK_CUDA(cudaEventSynchronize(checked_));  // the kernel, and so its write to host memory, is done
  return as_index(*static_cast<volatile unsigned long long*>(readback_.get()));
}

}  // namespace cnn::cuda
