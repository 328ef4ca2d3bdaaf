// Device pieces of softmax cross-entropy, shared by the twin (softmax_cross_entropy.cu) and the fused
// training step (seed_step.cu).
#pragma once

#include <cstdint>

#include "cuda/launch.hpp"
#include "dist/reduce.cuh"
#include "ops/seed_shape.hpp"

namespace cnn::cuda {

// One sample, with label smoothing S (the CPU twin's formula, include/cnn/ops.hpp): the target is
// q_k = (1 - S) [k == y] + S / K, loss = log(sum_k exp(z_k)) - (1 - S) z_y - (S / K) sum_k z_k,
// dloss/dz_k = softmax(z)_k - q_k; S = 0 runs the arithmetic of the builds before smoothing existed.
// The max is subtracted before exp so large logits cannot overflow. Writes the gradient when
// `grad` is not null; `correct` is 1 when the first maximal logit is the label.
__device__ __forceinline__ void softmax_cross_entropy_sample(const float (&z)[kSeedClasses], int label,
                                                             float label_smoothing,
                                                             float* __restrict__ grad /*[O] or null*/, float& loss,
                                                             int& correct) {
  constexpr int kO = kSeedClasses;
  float top = z[0];
  int top_index = 0;
#pragma unroll
  for (int k = 1; k < kO; ++k)
    if (z[k] > top) {
      top = z[k];
      top_index = k;
    }
  float e[kO];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kO; ++k) {
    e[k] = expf(z[k] - top);
    sum += e[k];
  }
  float z_label = z[0];
#pragma unroll
  for (int k = 1; k < kO; ++k) z_label = k == label ? z[k] : z_label;
  const float off_target = label_smoothing / static_cast<float>(kO);
  const float on_target = 1.0f - label_smoothing + off_target;
  if (label_smoothing == 0.0f) {
    loss = logf(sum) - (z_label - top);  // the CPU twin's form, so both round alike
  } else {
    float shifted_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kO; ++k) shifted_sum += z[k] - top;
    loss = logf(sum) - (1.0f - label_smoothing) * (z_label - top) - off_target * shifted_sum;
  }
  correct = top_index == label ? 1 : 0;
  if (grad != nullptr) {
    const float inv = 1.0f / sum;
#pragma unroll
    for (int k = 0; k < kO; ++k) grad[k] = e[k] * inv - (k == label ? on_target : off_target);
  }
}

// *loss_sum += sum_s sample_loss[s] (in double) and *correct += sum_s sample_correct[s], by one block
// of kBlockThreads threads in a fixed order.
__device__ inline void add_batch_stats_block(double* __restrict__ loss_sum, std::int64_t* __restrict__ correct,
                                             const float* __restrict__ sample_loss /*[n]*/,
                                             const int* __restrict__ sample_correct /*[n]*/, std::int64_t n) {
  __shared__ double loss_scratch[kBlockThreads / 32];
  __shared__ long long correct_scratch[kBlockThreads / 32];
  double loss = 0.0;
  long long hits = 0;
  for (std::int64_t s = threadIdx.x; s < n; s += blockDim.x) {
    loss += static_cast<double>(sample_loss[s]);
    hits += sample_correct[s];
  }
  const double loss_total = block_sum_shuffle(loss, loss_scratch);
  const long long hits_total = block_sum_shuffle(hits, correct_scratch);
  if (threadIdx.x == 0) {
    *loss_sum += loss_total;
    *correct += hits_total;
  }
}

}  // namespace cnn::cuda
