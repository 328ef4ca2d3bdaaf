// The maxpool layer on the device, the twin of src/layers/maxpool.cpp: its kernels and its op.
//
// Max-pooling on the device: the twins of src/layers/maxpool.cpp's maxpool_forward / maxpool_backward,
// and maxpool_backward_masked, the backward with that of a ReLU before the pool folded in
// (layer_ops.hpp).
//
// The maxpool op: the forward keeps each window's argmax; the backward routes the gradient to it,
// with the backward of a ReLU before the pool folded in (maxpool_backward_masked, layer_ops.hpp).
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/device_op.hpp"
#include "cuda/launch.hpp"
#include "ops/fast_div.cuh"
#include "ops/layer_ops.hpp"
#include "ops/staged_layout.cuh"

namespace cnn::cuda {

// ---- the kernels

namespace {

// Indices are 32-bit (the launchers check the sizes) and divided through FastDiv: the pooling kernels
// are memory-bound, and 64-bit divisions per element would cost more than the bytes.
struct PoolGeometry {
  int H, W, size, stride, OH, OW;
  int total_in, total_out;  // n*C*H*W, n*C*OH*OW
  FastDiv by_hw, by_w, by_ohw, by_ow;
};

// A thread per output; the first maximum in row-major window order wins (strictly greater replaces).
__global__ void maxpool_forward_kernel(float* __restrict__ out, std::int32_t* __restrict__ argmax,
                                       const float* __restrict__ in, PoolGeometry g) {
  start_after_previous_kernel();
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < g.total_out; e += gridDim.x * blockDim.x) {
    const auto [plane, r, py, px] = split_plane_index(e, g.by_ohw, g.by_ow);
    const float* src = in + static_cast<std::int64_t>(plane) * g.H * g.W;
    int best_index = (py * g.stride) * g.W + px * g.stride;
    float best = __ldg(src + best_index);
    for (int a = 0; a < g.size; ++a)
      for (int b = 0; b < g.size; ++b) {
        const int index = (py * g.stride + a) * g.W + px * g.stride + b;
        const float v = __ldg(src + index);
        if (v > best) {
          best = v;
          best_index = index;
        }
      }
    out[e] = best;
    argmax[e] = best_index;
  }
}

// The mask of a ReLU folded in before the pool: a window's winner let gradient through iff the
// window's maximum (the pool's output) is > 0, since the winner's input IS that maximum. Reading the
// pool's output instead of its input reads a quarter of the bytes for 2x2 windows.
//
// Overlapping windows (size != stride): a thread per INPUT pixel gathers, in row-major (py, px)
// order, the output gradients of the windows it won: no scatter, so no atomics. pooled_out may be
// null (no ReLU to fold in).
__global__ void maxpool_backward_gather_kernel(float* __restrict__ grad_in, const float* __restrict__ grad_out,
                                               const std::int32_t* __restrict__ argmax,
                                               const float* __restrict__ pooled_out, PoolGeometry g) {
  start_after_previous_kernel();
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < g.total_in; e += gridDim.x * blockDim.x) {
    const auto [plane, r, h, w] = split_plane_index(e, g.by_hw, g.by_w);
    const int out_plane = plane * g.OH * g.OW;
    // Windows py with py*stride <= h < py*stride + size.
    const int lo_y = h - g.size + 1, lo_x = w - g.size + 1;
    const int py0 = lo_y <= 0 ? 0 : (lo_y + g.stride - 1) / g.stride;
    const int px0 = lo_x <= 0 ? 0 : (lo_x + g.stride - 1) / g.stride;
    const int py1 = min(g.OH - 1, h / g.stride);
    const int px1 = min(g.OW - 1, w / g.stride);
    float sum = 0.0f;
    for (int py = py0; py <= py1; ++py)
      for (int px = px0; px <= px1; ++px) {
        const int o = out_plane + py * g.OW + px;
        if (argmax[o] == r && (pooled_out == nullptr || pooled_out[o] > 0.0f)) sum += grad_out[o];
      }
    grad_in[e] = sum;
  }
}

// Tiled windows (size == stride): each input pixel lies in at most one window, so a thread per
// WINDOW reads its argmax, gradient and (when masking) maximum at once and writes the window's
// pixels, the winner's gradient and zeros. The last row and column of windows also zero the pixels that no
// window covers (H or W not a multiple of the size).
__global__ void maxpool_backward_tiled_kernel(float* __restrict__ grad_in, const float* __restrict__ grad_out,
                                              const std::int32_t* __restrict__ argmax,
                                              const float* __restrict__ pooled_out, PoolGeometry g) {
  start_after_previous_kernel();
  for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < g.total_out; o += gridDim.x * blockDim.x) {
    const auto [plane, r, py, px] = split_plane_index(o, g.by_ohw, g.by_ow);
    const int winner = __ldg(argmax + o);
    float grad = __ldg(grad_out + o);
    if (pooled_out != nullptr && !(__ldg(pooled_out + o) > 0.0f)) grad = 0.0f;
    const int y0 = py * g.size, x0 = px * g.size;
    const int rows = py == g.OH - 1 ? g.H - y0 : g.size;
    const int cols = px == g.OW - 1 ? g.W - x0 : g.size;
    float* dst = grad_in + static_cast<std::int64_t>(plane) * g.H * g.W;
    for (int a = 0; a < rows; ++a)
      for (int b = 0; b < cols; ++b) {
        const int index = (y0 + a) * g.W + x0 + b;
        dst[index] = index == winner ? grad : 0.0f;
      }
  }
}

// maxpool_backward_tiled_kernel into the staged layout: a thread per kWords 32-bit words (of 1 tf32
// or 2 bf16 channels) of an input pixel, the words of a pixel on adjacent threads, so the writes are
// whole lines; each value the winner's masked gradient or 0, as there; channels C..Cp-1 and pixels no
// window covers are 0. kWords: 4 (a 16-byte chunk) where the chunks fill the GPU several times over,
// 1 where they do not (maxpool_backward_masked_staged).
template <Precision P, int kWords>
__global__ void maxpool_backward_staged_kernel(std::uint32_t* __restrict__ dst, const float* __restrict__ grad_out,
                                               const std::int32_t* __restrict__ argmax,
                                               const float* __restrict__ pooled_out, PoolGeometry g, int C,
                                               int units_per_pixel, int total_units) {
  start_after_previous_kernel();
  constexpr int kPerWord = word_elements(P);
  constexpr int kChannels = kWords * kPerWord;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total_units; e += gridDim.x * blockDim.x) {
    const int pixel = e / units_per_pixel;
    const int c0 = (e - pixel * units_per_pixel) * kChannels;
    const auto [s, r, y, x] = split_plane_index(pixel, g.by_hw, g.by_w);
    const int py = y / g.size, px = x / g.size;
    const bool covered = py < g.OH && px < g.OW;
    float v[kChannels + 1];  // + 1: tf32's pack_word reads one past its value and ignores it
#pragma unroll
    for (int q = 0; q <= kChannels; ++q) {
      v[q] = 0.0f;
      const int c = c0 + q;
      if (q == kChannels || !covered || c >= C) continue;
      const int o = ((s * C + c) * g.OH + py) * g.OW + px;
      if (__ldg(argmax + o) == r && (pooled_out == nullptr || __ldg(pooled_out + o) > 0.0f)) v[q] = __ldg(grad_out + o);
    }
    std::uint32_t w[kWords];
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = pack_word<P>(v[kPerWord * i], v[kPerWord * i + 1]);
    if constexpr (kWords == 4)
      reinterpret_cast<uint4*>(dst)[e] = make_uint4(w[0], w[1], w[2], w[3]);
    else
      dst[e] = w[0];
  }
}

PoolGeometry pool_geometry(const PoolShape& s, std::int64_t n) {
  check_int_range(n * s.in_size(), "a max-pool's input");
  PoolGeometry g;
  g.H = s.height;
  g.W = s.width;
  g.size = s.size;
  g.stride = s.stride;
  g.OH = s.out_h();
  g.OW = s.out_w();
  g.total_in = static_cast<int>(n * s.in_size());
  g.total_out = static_cast<int>(n * s.out_size());
  g.by_hw = FastDiv(g.H * g.W);
  g.by_w = FastDiv(g.W);
  g.by_ohw = FastDiv(g.OH * g.OW);
  g.by_ow = FastDiv(g.OW);
  return g;
}

}  // namespace

void maxpool_backward_masked(float* grad_in, const float* grad_out, const std::int32_t* argmax,
                             const float* pooled_out, std::int64_t n, const PoolShape& shape, cudaStream_t stream) {
  if (n <= 0) return;
  const PoolGeometry g = pool_geometry(shape, n);
  if (shape.size == shape.stride)
    launch_dependent(maxpool_backward_tiled_kernel, grid_for(g.total_out), kBlockThreads, 0, stream, grad_in, grad_out,
                     argmax, pooled_out, g);
  else
    launch_dependent(maxpool_backward_gather_kernel, grid_for(g.total_in), kBlockThreads, 0, stream, grad_in, grad_out,
                     argmax, pooled_out, g);
  CNN_CHECK_LAUNCH();
}

// A thread per chunk when there are at least this many chunks (4 waves of 1024 threads per SM on
// an H100). On nvidia-h200, 2026-11-26, each against the two passes in its own call: with a thread
// per chunk the cifar preset's bf16 step gained 5% at batch 2048 (2.8M chunks) and lost 1.2% at batch
// 32 (43k); with a thread per word it gained 2% at 2048 and 1.5% at 32 (docs/PERFORMANCE.md).
constexpr std::int64_t kMinChunksForChunkThreads = 4 * 132 * 1024;

template <Precision P>
void launch_maxpool_backward_staged(const StagedGrad& grad_in, const float* grad_out, const std::int32_t* argmax,
                                    const float* pooled_out, const PoolGeometry& g, int channels, cudaStream_t stream) {
  const int words_per_pixel = grad_in.channels_padded / word_elements(P);
  const std::int64_t words = std::int64_t{g.total_in} / channels * words_per_pixel;
  check_int_range(words, "a staged max-pool gradient");
  if (words / 4 >= kMinChunksForChunkThreads) {
    const int chunks = static_cast<int>(words / 4);
    launch_dependent(maxpool_backward_staged_kernel<P, 4>, grid_for(chunks), kBlockThreads, 0, stream, grad_in.words,
                     grad_out, argmax, pooled_out, g, channels, words_per_pixel / 4, chunks);
  } else {
    launch_dependent(maxpool_backward_staged_kernel<P, 1>, grid_for(words), kBlockThreads, 0, stream, grad_in.words,
                     grad_out, argmax, pooled_out, g, channels, words_per_pixel, static_cast<int>(words));
  }
}

void maxpool_backward_masked_staged(const StagedGrad& grad_in, const float* grad_out, const std::int32_t* argmax,
                                    const float* pooled_out, std::int64_t n, const PoolShape& shape,
                                    cudaStream_t stream) {
  if (n <= 0) return;
  const PoolGeometry g = pool_geometry(shape, n);
  if (grad_in.precision == Precision::kBf16)
    launch_maxpool_backward_staged<Precision::kBf16>(grad_in, grad_out, argmax, pooled_out, g, shape.channels, stream);
  else
    launch_maxpool_backward_staged<Precision::kTf32>(grad_in, grad_out, argmax, pooled_out, g, shape.channels, stream);
  CNN_CHECK_LAUNCH();
}

void maxpool_forward(float* out, std::int32_t* argmax, const float* in, std::int64_t n, const PoolShape& shape,
                     cudaStream_t stream) {
  if (n <= 0) return;
  const PoolGeometry g = pool_geometry(shape, n);
  launch_dependent(maxpool_forward_kernel, grid_for(g.total_out), kBlockThreads, 0, stream, out, argmax, in, g);
  CNN_CHECK_LAUNCH();
}

void maxpool_backward(float* grad_in, const float* grad_out, const std::int32_t* argmax, std::int64_t n,
                      const PoolShape& shape, cudaStream_t stream) {
  maxpool_backward_masked(grad_in, grad_out, argmax, nullptr, n, shape, stream);
}

// ---- the op

namespace {

class MaxPoolOp final : public DeviceOp {
 public:
  MaxPoolOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op), layer_(network.layers[op.first_layer]), shared_(shared) {
    out_size_ = layer_.out.size();
  }

  Prepared prepare(std::int64_t n) override { return Prepared{argmax_.reserve(n * out_size_), 0}; }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    maxpool_forward(t.out, argmax_.get(), t.in, batch.n, layer_.pool, shared_.stream);
  }

  // Tiled windows can write a staged conv's output gradient themselves (OpTensors::grad_in_staged).
  bool writes_staged_input_grad() const override { return layer_.pool.size == layer_.pool.stride; }

  // A ReLU before the pool masks through the pool's output (see maxpool_backward_masked).
  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter&) override {
    const float* pooled_out = t.input_is_relu ? t.out : nullptr;
    if (t.grad_in_staged.words != nullptr)
      maxpool_backward_masked_staged(t.grad_in_staged, t.grad_out, argmax_.get(), pooled_out, batch.n, layer_.pool,
                                     shared_.stream);
    else if (t.grad_in != nullptr)
      maxpool_backward_masked(t.grad_in, t.grad_out, argmax_.get(), pooled_out, batch.n, layer_.pool, shared_.stream);
  }

 private:
  const Layer& layer_;
  OpShared& shared_;
  DeviceBuffer<std::int32_t> argmax_;  // [n, out_size]
};

}  // namespace

std::unique_ptr<DeviceOp> make_maxpool_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<MaxPoolOp>(op, network, shared);
}

}  // namespace cnn::cuda
