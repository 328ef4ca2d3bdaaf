// The relu layer on the device, the twin of src/layers/relu.cpp: its kernels and its op.
//
// The ReLU twins of src/ (relu_forward, relu_backward): elementwise grid-stride kernels. The layer
// backend mostly folds its ReLUs into the neighbouring product's store or mask (layer_ops.hpp).
//
// The relu op, for a ReLU that no conv or fc before it took in (after a pool, say).
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/device_op.hpp"
#include "cuda/launch.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {

// ---- the kernels

namespace {

__global__ void relu_forward_kernel(float* out, const float* in, std::int64_t count) {
  start_after_previous_kernel();
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[e] = fmaxf(in[e], 0.0f);
}

__global__ void relu_backward_kernel(float* grad_in, const float* grad_out, const float* out, std::int64_t count) {
  start_after_previous_kernel();
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    grad_in[e] = out[e] > 0.0f ? grad_out[e] : 0.0f;
}

}  // namespace

void relu_forward(float* out, const float* in, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  launch_dependent(relu_forward_kernel, grid_for(count), kBlockThreads, 0, stream, out, in, count);
  CNN_CHECK_LAUNCH();
}

void relu_backward(float* grad_in, const float* grad_out, const float* out, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  launch_dependent(relu_backward_kernel, grid_for(count), kBlockThreads, 0, stream, grad_in, grad_out, out, count);
  CNN_CHECK_LAUNCH();
}

// ---- the op

namespace {

class ReluOp final : public DeviceOp {
 public:
  ReluOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op), size_(network.layers[op.first_layer].in.size()), shared_(shared) {
    out_size_ = size_;
    output_is_relu_ = true;
  }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    relu_forward(t.out, t.in, batch.n * size_, shared_.stream);
  }

  // Its own mask (output > 0) equals the one of a ReLU before it, so nothing else to fold.
  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter&) override {
    if (t.grad_in != nullptr) relu_backward(t.grad_in, t.grad_out, t.out, batch.n * size_, shared_.stream);
  }

 private:
  std::int64_t size_;  // floats per sample
  OpShared& shared_;
};

}  // namespace

std::unique_ptr<DeviceOp> make_relu_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<ReluOp>(op, network, shared);
}

}  // namespace cnn::cuda
