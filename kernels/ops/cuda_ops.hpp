// The CUDA twins of the CPU layer operations (include/cnn/ops.hpp) and optimizer updates
// (include/cnn/optimizer.hpp): same names, same argument order, same semantics, all pointers on the
// device, plus the stream to run on. Each returns once its kernels are queued (nothing syncs).
//
// Scratch space for the deterministic two-pass reductions comes from the stream-ordered allocator
// (cudaMallocAsync), so these calls may be captured in a CUDA graph. Supported shapes: kernel 3,
// 1 or 3 input channels, 10 classes (the seed CNN on MNIST, Fashion-MNIST and CIFAR-10); other
// shapes throw UsageError (see check_seed_shape).
//
// No reduction uses float atomics: every sum runs in an order fixed by the launch shape, so a run
// on the same GPU repeats bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cnn/augment.hpp"
#include "cnn/model.hpp"
#include "cnn/optimizer.hpp"

namespace cnn::cuda {

// Throws UsageError naming what the CUDA kernels do not support in `m`.
void check_seed_shape(const SeedModel& m);
// Whether the fused seed kernels take `m` (check_seed_shape would not throw).
bool seed_shape_supported(const SeedModel& m);

void gather_normalize(float* out /*[n, sample_size]*/, const std::uint8_t* images /*[N, sample_size]*/,
                      const std::int32_t* indices /*[n]*/, std::int64_t n, std::int64_t sample_size,
                      cudaStream_t stream);
// The CPU's gather_augment bit for bit; origin is in device memory (written by set_mask_origin before
// the step), so a captured step graph draws each replay's crops and flips.
void gather_augment(float* out /*[n, C*H*W]*/, const std::uint8_t* images /*[N, C*H*W]*/,
                    const std::int32_t* indices /*[n]*/, std::int64_t n, const TensorShape& shape,
                    const Augment& augment, const MaskOrigin* origin /*[1], device*/, cudaStream_t stream);
void gather_labels(std::uint8_t* labels_out /*[n]*/, const std::uint8_t* labels /*[N]*/,
                   const std::int32_t* indices /*[n]*/, std::int64_t n, cudaStream_t stream);

void conv_relu_pool_forward(float* pooled /*[n,F,PH,PW]*/, std::uint8_t* argmax /*[n,F,PH,PW]*/,
                            const float* in /*[n,C,H,W]*/, const float* weight /*[F,C,K,K]*/,
                            const float* bias /*[F]*/, std::int64_t n, const SeedModel& m, cudaStream_t stream);
void conv_relu_pool_backward(float* grad_weight /*[F,C,K,K]*/, float* grad_bias /*[F]*/,
                             const float* grad_pooled /*[n,F,PH,PW]*/, const float* pooled /*[n,F,PH,PW]*/,
                             const std::uint8_t* argmax /*[n,F,PH,PW]*/, const float* in /*[n,C,H,W]*/,
                             std::int64_t n, const SeedModel& m, cudaStream_t stream);

void fc_forward(float* out /*[n,O]*/, const float* in /*[n,I]*/, const float* weight /*[O,I]*/,
                const float* bias /*[O]*/, std::int64_t n, std::int64_t in_features, std::int64_t out_features,
                cudaStream_t stream);
void fc_backward(float* grad_in /*[n,I] or null*/, float* grad_weight /*[O,I]*/, float* grad_bias /*[O]*/,
                 const float* grad_out /*[n,O]*/, const float* in /*[n,I]*/, const float* weight /*[O,I]*/,
                 std::int64_t n, std::int64_t in_features, std::int64_t out_features, cudaStream_t stream);

// loss_sum and correct are DEVICE pointers; the batch's sums are added to them. label_smoothing: S of
// include/cnn/ops.hpp (0 for evaluation).
void softmax_cross_entropy(float* grad_logits /*[n,K] or null*/, double* loss_sum /*[1]*/,
                           std::int64_t* correct /*[1]*/, const float* logits /*[n,K]*/,
                           const std::uint8_t* labels /*[n]*/, std::int64_t n, int classes, float label_smoothing,
                           cudaStream_t stream);
// Its two halves, for a caller that keeps the per-sample buffers and sums the batch's stats on
// another stream than the one the backward continues on: the per-sample loss and hit (and
// dL/dlogits), then their fixed-order sums added to loss_sum and correct.
void softmax_cross_entropy_per_sample(float* grad_logits /*[n,K] or null*/, float* sample_loss /*[n]*/,
                                      int* sample_correct /*[n]*/, const float* logits /*[n,K]*/,
                                      const std::uint8_t* labels /*[n]*/, std::int64_t n, int classes,
                                      float label_smoothing, cudaStream_t stream);
void add_batch_stats(double* loss_sum /*[1]*/, std::int64_t* correct /*[1]*/, const float* sample_loss /*[n]*/,
                     const int* sample_correct /*[n]*/, std::int64_t n, cudaStream_t stream);

// Evaluation for `cnn_mpi predict`: the batch's logits [n, classes] copied (device to device, queued
// on `stream`) to `out`, which the backend then copies to the host.
void copy_logits(float* out /*[n,K]*/, const float* logits /*[n,K]*/, std::int64_t n, int classes,
                 cudaStream_t stream);

// The optimizer twins. skip_flag (optional): the divergence check's device word (nonfinite.cuh);
// when it is set the update leaves everything as it was.
void sgd_update(float* params, const float* grads, std::int64_t n, float lr, float weight_decay, float grad_scale,
                cudaStream_t stream, const unsigned long long* skip_flag = nullptr);
void momentum_update(float* params, float* velocity, const float* grads, std::int64_t n, float lr, float momentum,
                     float weight_decay, bool nesterov, float grad_scale, cudaStream_t stream,
                     const unsigned long long* skip_flag = nullptr);
// c: cnn::adam_step(settings), the host's float constants (the CPU twin's very values).
void adam_update(float* params, float* m, float* v, const float* grads, std::int64_t n, const AdamStep& c,
                 float grad_scale, cudaStream_t stream, const unsigned long long* skip_flag = nullptr);
// The twin of cnn::apply_optimizer over a whole flat buffer of `total` floats, by settings.kind
// (`state`: optimizer_state_per_param(kind) whole copies, adam: m then v): the device backend's
// apply_update.
void apply_optimizer(const OptimizerSettings& settings, float* params, float* state, const float* grads,
                     std::int64_t total, float grad_scale, cudaStream_t stream,
                     const unsigned long long* skip_flag = nullptr);

}  // namespace cnn::cuda
