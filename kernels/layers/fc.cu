// The fc layer on the device, the twin of src/layers/fc.cpp: its kernels and its op.
//
// Fully connected layer, forward and backward: the twin of src/layers/fc.cpp's fc_forward / fc_backward.
//
// The fc op (fully connected, its ReLU folded into the store when relu_after): the planned forms of
// layer_ops.hpp, with the launch shape fixed once per batch size (ProductOp, device_op.hpp); in tf32
// and bf16, with 256 or more inputs, the staged products of a 1x1 convolution (conv_tensor_core.cu).
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/device_op.hpp"
#include "cuda/launch.hpp"
#include "cuda/stream_scratch.hpp"
#include "ops/conv_backward.cuh"
#include "ops/cuda_ops.hpp"
#include "ops/fc_kernels.cuh"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {

// ---- the kernels

namespace {

// out[s,o] = bias[o] + the chunks' partial sums; a warp per sample.
__global__ void fc_forward_finalize_kernel(float* __restrict__ out /*[n,O]*/, const float* __restrict__ partial,
                                           const float* __restrict__ bias /*[O]*/, std::int64_t n,
                                           std::int64_t chunks) {
  start_after_previous_kernel();
  const unsigned lane = threadIdx.x & 31u;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t s = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32; s < n; s += warps) {
    float z[kSeedClasses];
    fc_logits_from_partials(z, partial, bias, n, chunks, s, lane);
#pragma unroll
    for (int o = 0; o < kSeedClasses; ++o)
      if (lane == static_cast<unsigned>(o)) out[s * kSeedClasses + o] = z[o];
  }
}

// Column sweep (see conv_backward.cuh for the layout): thread j walks its split of the samples and
//   sums dL/dW[o,j] = sum_s grad_out[s,o] * in[s,j] in registers, and (kInputGrad) writes
//   grad_in[s,j] = sum_o grad_out[s,o] * W[o,j], the transpose product, with W[:,j] in registers.
template <bool kInputGrad>
__global__ void __launch_bounds__(kBlockThreads)
    fc_backward_sweep_kernel(float* __restrict__ partial /*[splits, O, K]*/, float* __restrict__ grad_in /*[n,K]*/,
                             const float* __restrict__ grad_out /*[n,O]*/, const float* __restrict__ in /*[n,K]*/,
                             const float* __restrict__ weight /*[O,K]*/, std::int64_t n, std::int64_t columns,
                             std::int64_t samples_per_split) {
  start_after_previous_kernel();
  constexpr int kO = kSeedClasses;
  const std::int64_t s_begin = blockIdx.y * samples_per_split;
  const std::int64_t s_end = min(n, s_begin + samples_per_split);
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < columns;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float w[kO];
    if constexpr (kInputGrad) {
#pragma unroll
      for (int o = 0; o < kO; ++o) w[o] = weight[o * columns + j];
    }
    float acc[kO];
#pragma unroll
    for (int o = 0; o < kO; ++o) acc[o] = 0.0f;
#pragma unroll 4
    for (std::int64_t s = s_begin; s < s_end; ++s) {
      const float x = __ldg(in + s * columns + j);
      float go[kO];
#pragma unroll
      for (int o = 0; o < kO; ++o) go[o] = __ldg(grad_out + s * kO + o);
#pragma unroll
      for (int o = 0; o < kO; ++o) acc[o] = fmaf(go[o], x, acc[o]);
      if constexpr (kInputGrad) {
        float gi = 0.0f;
#pragma unroll
        for (int o = 0; o < kO; ++o) gi = fmaf(go[o], w[o], gi);
        grad_in[s * columns + j] = gi;
      }
    }
    float* dst = partial + blockIdx.y * static_cast<std::int64_t>(kO) * columns + j;
#pragma unroll
    for (int o = 0; o < kO; ++o) dst[o * columns] = acc[o];
  }
}

// All blocks but the last add the splits into grad_weight; the last sums grad_bias.
__global__ void __launch_bounds__(kBlockThreads)
    fc_backward_finalize_kernel(float* __restrict__ grad_weight /*[O,K]*/, float* __restrict__ grad_bias /*[O]*/,
                                const float* __restrict__ partial /*[splits, O, K]*/,
                                const float* __restrict__ grad_out /*[n,O]*/, std::int64_t n, std::int64_t columns,
                                std::int64_t splits) {
  start_after_previous_kernel();
  if (blockIdx.x == gridDim.x - 1) {
    fc_bias_grad_block(grad_bias, grad_out, n, /*accumulate=*/true);
    return;
  }
  fc_weight_grad_from_splits(grad_weight, partial, kSeedClasses, 0, splits, columns, blockIdx.x, gridDim.x - 1,
                             /*accumulate=*/true);
}

}  // namespace

// The seed's 10 outputs take the skinny kernels above; any other count the general matrix product.
void fc_forward(float* out, const float* in, const float* weight, const float* bias, std::int64_t n,
                std::int64_t in_features, std::int64_t out_features, cudaStream_t stream) {
  if (n <= 0) return;
  if (out_features != kSeedClasses) {
    const LayerPlans plans = plan_fc(in_features, out_features, n, multiprocessor_count());
    StreamScratch<float> workspace(plans.forward.workspace_floats(), stream);
    fc_forward_planned(plans.forward, out, in, weight, bias, n, in_features, out_features, false, workspace.get(),
                       stream);
    workspace.release();
    return;
  }
  const FcForwardPlan plan = plan_fc_forward(n, in_features, multiprocessor_count());
  StreamScratch<float> partial(plan.chunks * n * kSeedClasses, stream);
  launch_dependent(fc_forward_partial_kernel, plan.blocks, kFcForwardThreads, 0, stream, partial.get(), in, weight, n,
                   in_features, plan.chunk, plan.chunks);
  CNN_CHECK_LAUNCH();
  launch_dependent(fc_forward_finalize_kernel, grid_for(n * 32), kBlockThreads, 0, stream, out, partial.get(), bias, n,
                   plan.chunks);
  CNN_CHECK_LAUNCH();
  partial.release();
}

void fc_backward(float* grad_in, float* grad_weight, float* grad_bias, const float* grad_out, const float* in,
                 const float* weight, std::int64_t n, std::int64_t in_features, std::int64_t out_features,
                 cudaStream_t stream) {
  if (n <= 0) return;
  if (out_features != kSeedClasses) {
    const LayerPlans plans = plan_fc(in_features, out_features, n, multiprocessor_count());
    StreamScratch<float> workspace(plans.workspace_floats(), stream);
    if (grad_in != nullptr)
      fc_backward_data(plans.dgrad, grad_in, grad_out, weight, nullptr, n, in_features, out_features, workspace.get(),
                       stream);
    fc_backward_weights(plans.wgrad, grad_weight, grad_bias, grad_out, in, n, in_features, out_features, true,
                        workspace.get(), stream);
    workspace.release();
    return;
  }
  static const int resident = resident_blocks_per_multiprocessor(fc_backward_sweep_kernel<true>, kBlockThreads);
  const SweepPlan plan = plan_sweep(n, in_features, multiprocessor_count(), resident);
  StreamScratch<float> partial(plan.splits * kSeedClasses * in_features, stream);
  const dim3 grid(plan.column_blocks, static_cast<unsigned>(plan.splits));
  if (grad_in != nullptr)
    launch_dependent(fc_backward_sweep_kernel<true>, grid, kBlockThreads, 0, stream, partial.get(), grad_in, grad_out,
                     in, weight, n, in_features, plan.samples_per_split);
  else
    launch_dependent(fc_backward_sweep_kernel<false>, grid, kBlockThreads, 0, stream, partial.get(), nullptr, grad_out,
                     in, weight, n, in_features, plan.samples_per_split);
  CNN_CHECK_LAUNCH();
  const unsigned weight_blocks = grid_for(kSeedClasses * in_features);
  launch_dependent(fc_backward_finalize_kernel, weight_blocks + 1, kBlockThreads, 0, stream, grad_weight, grad_bias,
                   partial.get(), grad_out, n, in_features, plan.splits);
  CNN_CHECK_LAUNCH();
  partial.release();
}

// ---- the op

namespace {

class FcOp final : public ProductOp {
 public:
  using ProductOp::ProductOp;

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    const LayerPlans& plans = plans_for(batch.n);
    const bool weights_staged = weights_staged_at_start();
    if (plans.staged)
      conv2d_forward_staged(plans, t.out, t.out_staged, t.in, weight(), bias(), batch.n, as_conv(), relu_, staged(),
                            t.in_staged, weights_staged, shared_.workspace.get(), shared_.stream);
    else
      fc_forward_planned(plans.forward, t.out, t.in, weight(), bias(), batch.n, layer_.in.size(), layer_.fc_out,
                         relu_, shared_.workspace.get(), shared_.stream);
  }

  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter& ready) override {
    const LayerPlans& plans = plans_for(batch.n);
    const float* relu_out = t.input_is_relu ? t.in : nullptr;
    if (plans.staged) {
      // (Unless the op after has written it staged already: t.grad_out_staged.)
      if (!t.grad_out_staged) conv2d_stage_backward(plans, t.grad_out, batch.n, as_conv(), staged(), shared_.stream);
      const OpShared::Place place = shared_.weight_grad_place(t.grad_in != nullptr);
      conv2d_backward_weights_staged(plans, grad_weight(), grad_bias(), batch.n, as_conv(), false, staged(),
                                     place.workspace, place.stream);
      if (t.grad_in != nullptr)
        conv2d_backward_data_staged(plans, t.grad_in, relu_out, batch.n, as_conv(), staged(),
                                    shared_.workspace.get(), false, shared_.stream);
      report_ready(ready, place);
      return;
    }
    const OpShared::Place place = shared_.weight_grad_place(t.grad_in != nullptr);
    fc_backward_weights(plans.wgrad, grad_weight(), grad_bias(), t.grad_out, t.in, batch.n, layer_.in.size(),
                        layer_.fc_out, false, place.workspace, place.stream);
    if (t.grad_in != nullptr)
      fc_backward_data(plans.dgrad, t.grad_in, t.grad_out, weight(), relu_out, batch.n, layer_.in.size(),
                       layer_.fc_out, shared_.workspace.get(), shared_.stream);
    report_ready(ready, place);
  }

 private:
  // The layer as a convolution of 1x1 images with in.size() channels and fc_out 1x1 filters: the same
  // weights [O][I], the same input [n][I] (NCHW of 1x1 is NHWC), the same output [n][O]. In tf32 and
  // bf16 it takes the convolution's staged products (conv_tensor_core.cu), whose cp.async pipeline
  // keeps several k tiles in flight where the fc kernels' element loaders keep one.
  ConvShape as_conv() const {
    return {static_cast<int>(layer_.in.size()), 1, 1, static_cast<int>(layer_.fc_out), 1, 1, 0};
  }
  // Where it pays: the cifar preset's fc1 (1024 inputs) gained 0-4% of the step at every batch in both
  // precisions, its fc2 (64 inputs) lost up to 3% (a tiny product, and three staging launches a step);
  // nvidia-h100-x1, 2026-11-27, docs/PERFORMANCE.md, the fourteenth part.
  static constexpr std::int64_t kMinInputsAsConv = 256;
  bool as_conv_pays() const {
    return shared_.precision != Precision::kFp32 && layer_.in.size() >= kMinInputsAsConv;
  }
  LayerPlans plan(std::int64_t n) const override {
    if (as_conv_pays())
      return plan_conv(as_conv(), n, shared_.multiprocessors, kMaxColumnFloats, shared_.precision, shared_.wgmma);
    return plan_fc(layer_.in.size(), layer_.fc_out, n, shared_.multiprocessors, shared_.precision);
  }
  ConvShape staged_conv() const override { return as_conv(); }
  bool staged_products() const override { return as_conv_pays(); }
};

}  // namespace

std::unique_ptr<DeviceOp> make_fc_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<FcOp>(op, network, shared);
}

}  // namespace cnn::cuda
