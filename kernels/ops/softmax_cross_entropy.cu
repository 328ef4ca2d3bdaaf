// Softmax cross-entropy with integer labels and label smoothing: the twin of
// src/ops/softmax_cross_entropy.cpp's softmax_cross_entropy.
// The loss and correct count are summed per sample first, then by one block in a fixed order, so the
// device-side totals repeat bit for bit (no atomics).
#include "cuda/cuda_check.hpp"
#include "ops/cuda_ops.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "ops/softmax_kernels.cuh"
#include "cuda/stream_scratch.hpp"

namespace cnn::cuda {
namespace {

__global__ void softmax_cross_entropy_kernel(float* __restrict__ grad_logits /*[n,O] or null*/,
                                             float* __restrict__ sample_loss /*[n]*/,
                                             int* __restrict__ sample_correct /*[n]*/,
                                             const float* __restrict__ logits /*[n,O]*/,
                                             const std::uint8_t* __restrict__ labels /*[n]*/, std::int64_t n,
                                             float label_smoothing) {
  start_after_previous_kernel();
  constexpr int kO = kSeedClasses;
  for (std::int64_t s = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; s < n;
       s += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float z[kO];
#pragma unroll
    for (int k = 0; k < kO; ++k) z[k] = logits[s * kO + k];
    softmax_cross_entropy_sample(z, labels[s], label_smoothing, grad_logits != nullptr ? grad_logits + s * kO : nullptr,
                                 sample_loss[s], sample_correct[s]);
  }
}

__global__ void __launch_bounds__(kBlockThreads)
    add_batch_stats_kernel(double* __restrict__ loss_sum, std::int64_t* __restrict__ correct,
                           const float* __restrict__ sample_loss, const int* __restrict__ sample_correct,
                           std::int64_t n) {
  start_after_previous_kernel();
  add_batch_stats_block(loss_sum, correct, sample_loss, sample_correct, n);
}

void check_classes(int classes) {
  if (classes != kSeedClasses)
    throw UsageError("the cuda softmax kernel is built for " + std::to_string(kSeedClasses) + " classes, not " +
                     std::to_string(classes));
}

}  // namespace

void softmax_cross_entropy_per_sample(float* grad_logits, float* sample_loss, int* sample_correct, const float* logits,
                                      const std::uint8_t* labels, std::int64_t n, int classes, float label_smoothing,
                                      cudaStream_t stream) {
  check_classes(classes);
  if (n <= 0) return;
  launch_dependent(softmax_cross_entropy_kernel, grid_for(n), kBlockThreads, 0, stream, grad_logits, sample_loss,
                   sample_correct, logits, labels, n, label_smoothing);
  CNN_CHECK_LAUNCH();
}

void add_batch_stats(double* loss_sum, std::int64_t* correct, const float* sample_loss, const int* sample_correct,
                     std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch_dependent(add_batch_stats_kernel, 1, kBlockThreads, 0, stream, loss_sum, correct, sample_loss, sample_correct,
                   n);
  CNN_CHECK_LAUNCH();
}

void softmax_cross_entropy(float* grad_logits, double* loss_sum, std::int64_t* correct, const float* logits,
                           const std::uint8_t* labels, std::int64_t n, int classes, float label_smoothing,
                           cudaStream_t stream) {
  check_classes(classes);
  if (n <= 0) return;
  StreamScratch<float> sample_loss(n, stream);
  StreamScratch<int> sample_correct(n, stream);
  softmax_cross_entropy_per_sample(grad_logits, sample_loss.get(), sample_correct.get(), logits, labels, n, classes,
                                   label_smoothing, stream);
  add_batch_stats(loss_sum, correct, sample_loss.get(), sample_correct.get(), n, stream);
  sample_correct.release();
  sample_loss.release();
}

void copy_logits(float* out, const float* logits, std::int64_t n, int classes, cudaStream_t stream) {
  if (n <= 0) return;
  CNN_CHECK_CUDA(cudaMemcpyAsync(out, logits, static_cast<std::size_t>(n * classes) * sizeof(float),
                                 cudaMemcpyDeviceToDevice, stream));
}

}  // namespace cnn::cuda
