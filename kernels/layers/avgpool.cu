// The avgpool layer on the device, the twin of src/layers/avgpool.cpp: its kernels and its op.
//
// Average pooling on the device: the twins of avgpool_forward / avgpool_backward, and
// avgpool_backward_masked, the backward with that of a ReLU before the pool folded in. Both sum in
// the order of the CPU twins (row-major window order forward; row-major (py, px) order of the
// windows that hold a pixel backward, a thread per input pixel gathering: no atomics) and multiply
// by the scale once at the end, so they give the CPU's bits.
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/device_op.hpp"
#include "cuda/launch.hpp"
#include "ops/fast_div.cuh"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {

// ---- the kernels

namespace {

// 32-bit indices (the launchers check the sizes) divided through FastDiv, as maxpool.cu does.
struct AvgPoolGeometry {
  int H, W, window_h, window_w, stride, OH, OW;
  int total_in, total_out;  // n*C*H*W, n*C*OH*OW
  float scale;
  FastDiv by_hw, by_w, by_ohw, by_ow;
};

// A thread per output.
__global__ void avgpool_forward_kernel(float* __restrict__ out, const float* __restrict__ in, AvgPoolGeometry g) {
  start_after_previous_kernel();
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < g.total_out; e += gridDim.x * blockDim.x) {
    const auto [plane, r, py, px] = split_plane_index(e, g.by_ohw, g.by_ow);
    const float* src = in + static_cast<std::int64_t>(plane) * g.H * g.W + (py * g.stride) * g.W + px * g.stride;
    float sum = 0.0f;
    for (int a = 0; a < g.window_h; ++a)
      for (int b = 0; b < g.window_w; ++b) sum += __ldg(src + a * g.W + b);
    out[e] = sum * g.scale;
  }
}

// A thread per input pixel, gathering the gradients of the windows that hold it. relu_in (the
// pool's input, a ReLU's output) may be null; where given, the pixel's gradient is zero wherever it is <= 0.
__global__ void avgpool_backward_kernel(float* __restrict__ grad_in, const float* __restrict__ grad_out,
                                        const float* __restrict__ relu_in, AvgPoolGeometry g) {
  start_after_previous_kernel();
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < g.total_in; e += gridDim.x * blockDim.x) {
    const auto [plane, r, h, w] = split_plane_index(e, g.by_hw, g.by_w);
    const float* src = grad_out + plane * g.OH * g.OW;
    const int lo_y = h - g.window_h + 1, lo_x = w - g.window_w + 1;
    const int py0 = lo_y <= 0 ? 0 : (lo_y + g.stride - 1) / g.stride;
    const int px0 = lo_x <= 0 ? 0 : (lo_x + g.stride - 1) / g.stride;
    const int py1 = min(g.OH - 1, h / g.stride);
    const int px1 = min(g.OW - 1, w / g.stride);
    float sum = 0.0f;
    for (int py = py0; py <= py1; ++py)
      for (int px = px0; px <= px1; ++px) sum += __ldg(src + py * g.OW + px);
    grad_in[e] = relu_in != nullptr && !(__ldg(relu_in + e) > 0.0f) ? 0.0f : sum * g.scale;
  }
}

AvgPoolGeometry avgpool_geometry(const AvgPoolShape& s, std::int64_t n) {
  check_int_range(n * s.in_size(), "an average pool's input");
  AvgPoolGeometry g;
  g.H = s.height;
  g.W = s.width;
  g.window_h = s.window_h;
  g.window_w = s.window_w;
  g.stride = s.stride;
  g.OH = s.out_h();
  g.OW = s.out_w();
  g.total_in = static_cast<int>(n * s.in_size());
  g.total_out = static_cast<int>(n * s.out_size());
  g.scale = s.scale();
  g.by_hw = FastDiv(g.H * g.W);
  g.by_w = FastDiv(g.W);
  g.by_ohw = FastDiv(g.OH * g.OW);
  g.by_ow = FastDiv(g.OW);
  return g;
}

}  // namespace

void avgpool_forward(float* out, const float* in, std::int64_t n, const AvgPoolShape& shape, cudaStream_t stream) {
  if (n <= 0) return;
  const AvgPoolGeometry g = avgpool_geometry(shape, n);
  launch_dependent(avgpool_forward_kernel, grid_for(g.total_out), kBlockThreads, 0, stream, out, in, g);
  CNN_CHECK_LAUNCH();
}

void avgpool_backward_masked(float* grad_in, const float* grad_out, const float* relu_in, std::int64_t n,
                             const AvgPoolShape& shape, cudaStream_t stream) {
  if (n <= 0) return;
  const AvgPoolGeometry g = avgpool_geometry(shape, n);
  launch_dependent(avgpool_backward_kernel, grid_for(g.total_in), kBlockThreads, 0, stream, grad_in, grad_out,
                   relu_in, g);
  CNN_CHECK_LAUNCH();
}

void avgpool_backward(float* grad_in, const float* grad_out, std::int64_t n, const AvgPoolShape& shape,
                      cudaStream_t stream) {
  avgpool_backward_masked(grad_in, grad_out, nullptr, n, shape, stream);
}

// ---- the op

namespace {

class AvgPoolOp final : public DeviceOp {
 public:
  AvgPoolOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op), layer_(network.layers[op.first_layer]), shared_(shared) {
    out_size_ = layer_.out.size();
  }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    avgpool_forward(t.out, t.in, batch.n, layer_.avg_pool, shared_.stream);
  }

  // A ReLU before the pool (folded into the op before) masks through the pool's input.
  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter&) override {
    if (t.grad_in != nullptr)
      avgpool_backward_masked(t.grad_in, t.grad_out, t.input_is_relu ? t.in : nullptr, batch.n, layer_.avg_pool,
                              shared_.stream);
  }

 private:
  const Layer& layer_;
  OpShared& shared_;
};

}  // namespace

std::unique_ptr<DeviceOp> make_avgpool_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<AvgPoolOp>(op, network, shared);
}

}  // namespace cnn::cuda
