// One training step of the seed CNN on the device, fused where it saves memory traffic or launches:
//   seed_forward: conv + ReLU + pool straight from the uint8 data set (through the batch's indices),
//     writing pooled and argmax, and the fc layer's partial logits over this block's filters
//   -> fc_softmax: logits = bias + partial sums, softmax cross-entropy -> dL/dlogits
//   -> conv_backward_sweep (fused): fc and conv weight gradients in one pass; grad_pooled is
//     computed on the fly, never stored, and the pool winners' input windows come from the patches
//     the forward saved (one 16-byte load per sample and column instead of nine scattered bytes)
//   -> finalize: adds every partial sum in a fixed order, writes the gradients and the batch's stats.
//   (fc-first, for the overlapped step: the sweep and the finalize each run in two parts, the fc
//   layer's first, so its allreduce can start while the conv layer's part runs.)
// It equals the twins' composition up to float rounding; tests compare it with `seq`. The cuda
// backend runs it as the conv_relu_pool_fc_softmax op (op_conv_relu_pool_fc_softmax.cu). (An unfused
// forward for A/B, the twins then the same last three kernels, was retired after its comparison:
// docs/PERFORMANCE.md.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "cnn/model.hpp"
#include "ops/sweep_plan.hpp"

namespace cnn::cuda {

// Device pointers for one step. Gradients are OVERWRITTEN with the sum over the batch.
struct SeedStepTensors {
  const float* conv_weight = nullptr;     // [F,C,3,3]
  const float* conv_bias = nullptr;       // [F]
  const float* fc_weight = nullptr;       // [O, F*P]
  const float* fc_bias = nullptr;         // [O]
  float* grad_conv_weight = nullptr;      // [F,C,3,3]
  float* grad_conv_bias = nullptr;        // [F]
  float* grad_fc_weight = nullptr;        // [O, F*P]
  float* grad_fc_bias = nullptr;          // [O]
  const std::uint8_t* images = nullptr;   // [N,C,H,W], the resident training set
  const std::uint8_t* all_labels = nullptr;  // [N]
  const std::int32_t* indices = nullptr;  // [n], this batch's samples
  float* pooled = nullptr;                // [n, F*P]
  std::uint8_t* argmax = nullptr;         // [n, F*P]
  float* fc_partial = nullptr;            // [plan.logit_parts, n, O]
  float* grad_logits = nullptr;           // [n, O]
  float* sample_loss = nullptr;           // [n]
  int* sample_correct = nullptr;          // [n]
  float* sweep_partial = nullptr;         // [plan.sweep.splits, plan.sweep_rows, F*P]
  uint4* patches = nullptr;               // [plan.patch_words]: [n, C, P] 4x4 uint8 input patches
  double* loss_sum = nullptr;             // [1], the batch's loss sum is added
  std::int64_t* correct = nullptr;        // [1], the batch's correct count is added
  float label_smoothing = 0.0f;           // of the loss (--label-smoothing; include/cnn/ops.hpp)
};

// Launch shapes and scratch sizes for a batch of n; fixed by (model, n, GPU model), so the order of
// every sum, and with it every bit of the result, repeats.
struct SeedStepPlan {
  std::int64_t n = 0;
  // The forward: blocks of forward_samples samples x `filters_per_group` filters.
  int filters_per_group = 0;
  std::int64_t filter_groups = 0;
  int forward_threads = 0;
  std::int64_t logit_parts = 0;  // partial sums per logit: the filter groups
  SweepPlan sweep;
  int sweep_rows = 0;
  std::int64_t fc_partial_floats = 0;
  std::int64_t sweep_partial_floats = 0;
  std::int64_t patch_words = 0;  // 16-byte words of saved input patches
};

SeedStepPlan plan_seed_step(const SeedModel& m, std::int64_t n);

// Queue the step's stages on `stream` (n = plan.n >= 1), in this order; the backend captures both,
// once per batch size, into one CUDA graph, and marks the phase boundary between them.
// forward: pooled, argmax, the saved input patches, the logits' partial sums, dL/dlogits and the
// per-sample losses.
void seed_forward_stage(const SeedStepTensors& t, const SeedModel& m, const SeedStepPlan& plan, cudaStream_t stream);
// backward: every gradient (overwritten) and the batch's loss and correct count (added). With
// `fc_ready`, fc-first: the fc layer's gradients (weight and bias) are computed in passes of their own,
// fc_ready() is called when they are final in stream order, and only then are the conv layer's
// computed. The same bits either way; the fc-first form costs a second read of the pooled activations.
void seed_backward_stage(const SeedStepTensors& t, const SeedModel& m, const SeedStepPlan& plan, cudaStream_t stream,
                         const std::function<void()>& fc_ready = {});

}  // namespace cnn::cuda
