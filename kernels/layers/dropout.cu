// The dropout layer on the device, the twin of src/layers/dropout.cpp: its kernels and its op.
//
// The factors come from dropout_mask.hpp, the same integer hash as on the host, so a step draws the
// CPU's masks bit for bit. The step's MaskOrigin lives in device memory (DeviceBatch::mask_origin),
// written by set_mask_origin before each step: a captured step graph reads it where it stands, so a
// replay draws the new step's masks with nothing in the graph changed. Nothing is stored between the
// passes: the backward draws the factors again.
#include <cstdint>

#include "cnn/dropout_mask.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/device_op.hpp"
#include "cuda/launch.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {

// ---- the kernels

namespace {

__global__ void set_mask_origin_kernel(MaskOrigin* origin, MaskOrigin value) { *origin = value; }

// out[s,e] = in[s,e] * factor(s, e); where relu_in is given (in is a ReLU's output and this is the
// backward), also zero wherever relu_in <= 0. A thread per element; the sample and the element in it
// by one 64-bit division (dropout stands where activations are small: after pools and fc layers).
__global__ void dropout_kernel(float* __restrict__ out, const float* __restrict__ in,
                               const float* __restrict__ relu_in, std::int64_t count, std::int64_t size,
                               DropoutDraw draw, const MaskOrigin* __restrict__ origin) {
  start_after_previous_kernel();
  const MaskOrigin at = *origin;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t s = e / size;
    const float factor = dropout_factor(draw, at.step_key, static_cast<std::uint64_t>(at.first_sample + s),
                                        static_cast<std::uint64_t>(e - s * size));
    out[e] = relu_in != nullptr && !(relu_in[e] > 0.0f) ? 0.0f : in[e] * factor;
  }
}

void launch_dropout(float* out, const float* in, const float* relu_in, std::int64_t n, std::int64_t size,
                    const DropoutDraw& draw, const MaskOrigin* origin, cudaStream_t stream) {
  if (n <= 0) return;
  const std::int64_t count = n * size;
  launch_dependent(dropout_kernel, grid_for(count), kBlockThreads, 0, stream, out, in, relu_in, count, size, draw,
                   origin);
  CNN_CHECK_LAUNCH();
}

}  // namespace

void set_mask_origin(MaskOrigin* origin, const MaskOrigin& value, cudaStream_t stream) {
  set_mask_origin_kernel<<<1, 1, 0, stream>>>(origin, value);
  CNN_CHECK_LAUNCH();
}

void dropout_forward(float* out, const float* in, std::int64_t n, std::int64_t size, const DropoutDraw& draw,
                     const MaskOrigin* origin, cudaStream_t stream) {
  launch_dropout(out, in, nullptr, n, size, draw, origin, stream);
}

void dropout_backward(float* grad_in, const float* grad_out, std::int64_t n, std::int64_t size,
                      const DropoutDraw& draw, const MaskOrigin* origin, cudaStream_t stream) {
  launch_dropout(grad_in, grad_out, nullptr, n, size, draw, origin, stream);
}

// ---- the op

namespace {

class DropoutOp final : public DeviceOp {
 public:
  DropoutOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op),
        size_(network.layers[op.first_layer].in.size()),
        draw_(dropout_draw(network.layers[op.first_layer].dropout, network.layers[op.first_layer].token)),
        shared_(shared) {
    out_size_ = size_;
  }

  // Evaluation keeps everything, unscaled: a copy.
  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    if (!batch.training) {
      CNN_CHECK_CUDA(cudaMemcpyAsync(t.out, t.in, sizeof(float) * static_cast<std::size_t>(batch.n * size_),
                                     cudaMemcpyDeviceToDevice, shared_.stream));
      return;
    }
    launch_dropout(t.out, t.in, nullptr, batch.n, size_, draw_, batch.mask_origin, shared_.stream);
  }

  // A ReLU before the layer (folded into the op before) masks through the layer's input.
  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter&) override {
    if (t.grad_in != nullptr)
      launch_dropout(t.grad_in, t.grad_out, t.input_is_relu ? t.in : nullptr, batch.n, size_, draw_,
                     batch.mask_origin, shared_.stream);
  }

 private:
  std::int64_t size_;  // floats per sample
  DropoutDraw draw_;
  OpShared& shared_;
};

}  // namespace

std::unique_ptr<DeviceOp> make_dropout_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<DropoutOp>(op, network, shared);
}

}  // namespace cnn::cuda
