// The CUDA twin of cnn::first_nonfinite (include/cnn/nonfinite.hpp), and the divergence check that
// does not wait for its answer; see kernels/ops/nonfinite.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_buffer.hpp"

namespace cnn::cuda {

// The check's device word when every value was finite: larger than any index.
inline constexpr unsigned long long kAllFinite = ~0ULL;

// Index of the first non-finite value in the device buffer data[0, count), or -1. Synchronises
// `stream` (the answer is read back).
std::int64_t first_nonfinite(const float* data, std::int64_t count, cudaStream_t stream);

// The per-step divergence check of a device backend without a host wait in the step: enqueue()
// queues one kernel that writes the first non-finite index of the reduced gradient into a device
// word, which the optimizer kernels read (they leave parameters and state untouched when it is set,
// see optimizer_update), and into pinned host memory; result() waits for that kernel only. The
// trainer reads a step's result during the next step (src/train/divergence.cpp), so the GPU never idles
// for it.
class DeferredNonFiniteCheck {
 public:
  // On the current device; the word starts as kAllFinite (updates run until a check says otherwise).
  explicit DeferredNonFiniteCheck(cudaStream_t stream);
  ~DeferredNonFiniteCheck();
  DeferredNonFiniteCheck(const DeferredNonFiniteCheck&) = delete;
  DeferredNonFiniteCheck& operator=(const DeferredNonFiniteCheck&) = delete;

  void enqueue(const float* data, std::int64_t count, cudaStream_t stream);
  // The index the last enqueue() found, or -1; waits for that check (not for later work).
  std::int64_t result();
  // The device word for the optimizer kernels.
  const unsigned long long* skip_flag() const;

 private:
  DeviceBuffer<unsigned long long> words_;  // the kernel's running minimum and count of blocks done, then the word
  PinnedBuffer<unsigned long long> readback_;
  unsigned long long* readback_on_device_ = nullptr;  // readback_ as the kernel addresses it
  cudaEvent_t checked_ = nullptr;
  bool enqueued_ = false;
};

}  // namespace cnn::cuda
