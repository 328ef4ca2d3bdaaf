// The maxpool layer on the device, the twin of src/layers/maxpool.cpp: its kernels and its op.
//
// Max-pooling on the device: the twins of src/layers/maxpool.cpp's maxpool_forward / maxpool_backward,
// and maxpool_backward_masked, the backward with that of a ReLU before the pool folded in
// (layer_ops.hpp).
//
// The maxpool op: the forward keeps each window's argmax; the backward routes the gradient to it,
// with the backward of a ReLU before the pool folded in (maxpool_backward_masked, layer_ops.hpp).
// After a staged conv + ReLU that pools in its store (OpTensors::pooled), the op's forward is that
// conv's: it only lends its argmax (pool_argmax).
#include <cstdint>
#include <string>

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

// Window (py, px) of a plane: its maximum and where it is in the plane. The first maximum in row-major
// window order wins (strictly greater replaces).
struct WindowMax {
  float value;
  int index;
};
__device__ __forceinline__ WindowMax window_max(const float* __restrict__ plane, const PoolGeometry& g, int py,
                                                int px) {
  WindowMax best{0.0f, (py * g.stride) * g.W + px * g.stride};
  best.value = __ldg(plane + best.index);
  for (int a = 0; a < g.size; ++a)
    for (int b = 0; b < g.size; ++b) {
      const int index = (py * g.stride + a) * g.W + px * g.stride + b;
      const float v = __ldg(plane + index);
      if (v > best.value) best = {v, index};
    }
  return best;
}

// A thread per output.
__global__ void maxpool_forward_kernel(float* __restrict__ out, std::int32_t* __restrict__ argmax,
                                       const float* __restrict__ in, PoolGeometry g) {
  start_after_previous_kernel();
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < g.total_out; e += gridDim.x * blockDim.x) {
    const auto [plane, r, py, px] = split_plane_index(e, g.by_ohw, g.by_ow);
    const WindowMax best = window_max(in + static_cast<std::int64_t>(plane) * g.H * g.W, g, py, px);
    out[e] = best.value;
    argmax[e] = best.index;
  }
}

// A block's tile of the staged kernels below, as stage_nhwc_kernel stages a tensor: 32 windows (s, py,
// px in the pool output's order) x 32 channels, read with lanes on consecutive windows of a plane
// (coalesced in the pool's NCHW output) into shared memory, then written as 16-byte chunks of a
// pixel's channels (whole sectors of the staged NHWC words). (A tile of 64 channels for the backward,
// whose 32 windows x 4 bf16 chunks leave half of the 256 threads idle in its write phase, was 5% faster
// in tf32 and 3% slower in bf16 at batch 2048: nvidia-h100-x1, 2026-11-28, docs/PERFORMANCE.md.)
struct PoolTile {
  static constexpr int kWindows = 32;
  static constexpr int kChannels = 32;

  // A (channel, window) of the block's tile: lc, lw in the tile; c and window (s * OH * OW + r, r = py
  // * OW + px) in the tensor; plane = s * C + c, and o its index in the pool's output [n,C,OH,OW].
  struct Element {
    int lc, lw, c, window, plane, o, py, px;
  };
  // inside(Element) for each (channel, window) of the block's tile in the tensor; outside(lc, lw) for
  // the rest.
  template <class Inside, class Outside>
  static __device__ __forceinline__ void read(const PoolGeometry& g, int C, int windows, Inside inside,
                                              Outside outside) {
    const int lw = threadIdx.x % kWindows;
    const int window = blockIdx.x * kWindows + lw;
    const auto [s, r, py, px] = split_plane_index(window, g.by_ohw, g.by_ow);
    for (int lc = threadIdx.x / kWindows; lc < kChannels; lc += kBlockThreads / kWindows) {
      const int c = blockIdx.y * kChannels + lc;
      if (window < windows && c < C)
        inside(Element{lc, lw, c, window, s * C + c, (s * C + c) * g.OH * g.OW + r, py, px});
      else
        outside(lc, lw);
    }
  }

  // chunk(window, lw, j, c0) for each chunk j of kPerChunk channels c0.. (c0 < Cp) of each window of
  // the block's tile in the tensor.
  template <int kPerChunk, class Chunk>
  static __device__ __forceinline__ void write(int Cp, int windows, Chunk chunk) {
    constexpr int kChunksPerTile = kChannels / kPerChunk;
    for (int e = threadIdx.x; e < kWindows * kChunksPerTile; e += kBlockThreads) {
      const int lw = e / kChunksPerTile;
      const int j = e - lw * kChunksPerTile;
      const int window = blockIdx.x * kWindows + lw;
      const int c0 = blockIdx.y * kChannels + j * kPerChunk;
      if (window < windows && c0 < Cp) chunk(window, lw, j, c0);
    }
  }

  static dim3 grid(int windows, int channels_padded) {
    return dim3(static_cast<unsigned>(ceil_div(windows, kWindows)),
                static_cast<unsigned>(ceil_div(channels_padded, kChannels)));
  }
};

// maxpool_forward_kernel that also writes the output into the staged input of the conv after the pool
// ([n,OH,OW,Cp] words), a block per PoolTile: the outputs and argmaxes as the plain kernel writes
// them, then one 16-byte chunk of 4 tf32 or 8 bf16 channels of a window's pixel per thread; channels
// C..Cp-1 are 0.
template <Precision P>
__global__ void __launch_bounds__(kBlockThreads)
    maxpool_forward_staged_kernel(float* __restrict__ out, std::int32_t* __restrict__ argmax,
                                  uint4* __restrict__ staged, const float* __restrict__ in, PoolGeometry g, int C,
                                  int Cp, int windows /*n * OH * OW*/) {
  start_after_previous_kernel();
  constexpr int kPerChunk = chunk_elements(P);
  __shared__ float max_s[PoolTile::kChannels][PoolTile::kWindows + 1];
  PoolTile::read(
      g, C, windows,
      [&](const PoolTile::Element& e) {
        const WindowMax best = window_max(in + static_cast<std::int64_t>(e.plane) * g.H * g.W, g, e.py, e.px);
        out[e.o] = best.value;
        argmax[e.o] = best.index;
        max_s[e.lc][e.lw] = best.value;
      },
      [&](int lc, int lw) { max_s[lc][lw] = 0.0f; });
  __syncthreads();
  PoolTile::write<kPerChunk>(Cp, windows, [&](int window, int lw, int j, int c0) {
    float v[kPerChunk];
#pragma unroll
    for (int q = 0; q < kPerChunk; ++q) v[q] = max_s[j * kPerChunk + q][lw];
    staged[(static_cast<std::int64_t>(window) * Cp + c0) / kPerChunk] = pack_chunk<P>(v);
  });
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

// The pool's output gradient at an element of the tile: grad_out, or where the conv after the pool left
// it in its split partials (SplitPartials, layer_ops.hpp: [splits][C][n*OH*OW]), their sum in split
// order from 0, as gemm_finalize_kernel adds them, so the same bits: the conv's sum kernel is one
// launch fewer on the step's chain (the cifar preset's conv3 at small batches). Every split's load is
// issued before the adds: with the loads one at a time, each after the add before it, the kernel grew
// by as much as the sum kernel it replaced took (nvidia-h100-x1, 2026-11-28, docs/PERFORMANCE.md).
struct PoolGradOut {
  const float* grad;      // [n,C,OH,OW], where partials.sums is null
  SplitPartials partials;
  __device__ __forceinline__ float operator()(const PoolTile::Element& e) const {
    if (partials.sums == nullptr) return __ldg(grad + e.o);
    const std::int64_t plane = std::int64_t{partials.rows} * partials.columns;
    const float* at = partials.sums + static_cast<std::int64_t>(e.c) * partials.rows + e.window;
    float split[kMaxSplitsAddedInOrder];
#pragma unroll
    for (int z = 0; z < kMaxSplitsAddedInOrder; ++z) split[z] = z < partials.splits ? __ldg(at + z * plane) : 0.0f;
    float sum = 0.0f;
#pragma unroll
    for (int z = 0; z < kMaxSplitsAddedInOrder; ++z)
      if (z < partials.splits) sum += split[z];
    return sum;
  }
};

// maxpool_backward_tiled_kernel into the staged layout, a block per PoolTile: each window's
// argmax, gradient and maximum read once (the gradient only where the mask lets it through), then one
// 16-byte chunk of 4 tf32 or 8 bf16 channels per thread at every pixel of a window: the winner's masked
// gradient or 0, as the tiled kernel. Channels C..Cp-1 are 0, and the last row and column of windows
// also write the pixels no window covers (H or W not a multiple of the size), with 0. For conv2 of the
// cifar preset at batch 2048 this takes 66-68 us in tf32 and bf16 on nvidia-h100-x1 and 51-54 on
// nvidia-h200 (ncu). Slower forms, nvidia-h100-x1: a thread per (window, pixel, chunk), 75-77 us in
// bf16; a thread per pixel and chunk with no shared memory, reading each window once per pixel of it,
// 80 us in bf16 and 101 in tf32; a thread per window and chunk with windows on adjacent lanes, writing
// 16 bytes of every 512, 74 and 163 us. docs/PERFORMANCE.md.
template <Precision P>
__global__ void __launch_bounds__(kBlockThreads)
    maxpool_backward_staged_kernel(uint4* __restrict__ dst, PoolGradOut grad_out,
                                   const std::int32_t* __restrict__ argmax, const float* __restrict__ pooled_out,
                                   PoolGeometry g, int C, int Cp, int windows /*n * OH * OW*/) {
  start_after_previous_kernel();
  constexpr int kPerChunk = chunk_elements(P);
  __shared__ std::int32_t winner_s[PoolTile::kChannels][PoolTile::kWindows + 1];
  __shared__ float grad_s[PoolTile::kChannels][PoolTile::kWindows + 1];
  PoolTile::read(
      g, C, windows,
      [&](const PoolTile::Element& e) {
        winner_s[e.lc][e.lw] = __ldg(argmax + e.o);
        grad_s[e.lc][e.lw] = pooled_out == nullptr || __ldg(pooled_out + e.o) > 0.0f ? grad_out(e) : 0.0f;
      },
      [&](int lc, int lw) {
        winner_s[lc][lw] = -1;
        grad_s[lc][lw] = 0.0f;
      });
  __syncthreads();
  PoolTile::write<kPerChunk>(Cp, windows, [&](int window, int lw, int j, int c0) {
    const auto [s, r, py, px] = split_plane_index(window, g.by_ohw, g.by_ow);
    std::int32_t winner[kPerChunk];
    float grad[kPerChunk];
#pragma unroll
    for (int q = 0; q < kPerChunk; ++q) {
      winner[q] = winner_s[j * kPerChunk + q][lw];
      grad[q] = grad_s[j * kPerChunk + q][lw];
    }
    const int y0 = py * g.size, x0 = px * g.size;
    const int rows = py == g.OH - 1 ? g.H - y0 : g.size;
    const int cols = px == g.OW - 1 ? g.W - x0 : g.size;
    uint4* sample = dst + (static_cast<std::int64_t>(s) * g.H * g.W * Cp + c0) / kPerChunk;
    for (int a = 0; a < rows; ++a)
      for (int b = 0; b < cols; ++b) {
        const int index = (y0 + a) * g.W + x0 + b;  // in the plane
        float v[kPerChunk];
#pragma unroll
        for (int q = 0; q < kPerChunk; ++q) v[q] = winner[q] == index ? grad[q] : 0.0f;
        sample[static_cast<std::int64_t>(index) * (Cp / kPerChunk)] = pack_chunk<P>(v);
      }
  });
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

template <Precision P>
void launch_maxpool_backward_staged(const StagedTensor& grad_in, const PoolGradOut& grad_out,
                                    const std::int32_t* argmax, const float* pooled_out, const PoolGeometry& g,
                                    int channels, cudaStream_t stream) {
  const int windows = g.total_out / channels;  // n * OH * OW
  check_int_range(std::int64_t{g.total_in} / channels * grad_in.channels_padded, "a staged max-pool gradient");
  const dim3 grid = PoolTile::grid(windows, grad_in.channels_padded);
  launch_dependent(maxpool_backward_staged_kernel<P>, grid, kBlockThreads, 0, stream,
                   reinterpret_cast<uint4*>(grad_in.words), grad_out, argmax, pooled_out, g, channels,
                   grad_in.channels_padded, windows);
}

void maxpool_backward_masked_staged(const StagedTensor& grad_in, const float* grad_out,
                                    const SplitPartials& grad_out_partials, const std::int32_t* argmax,
                                    const float* pooled_out, std::int64_t n, const PoolShape& shape,
                                    cudaStream_t stream) {
  if (n <= 0) return;
  const PoolGeometry g = pool_geometry(shape, n);
  const std::int64_t windows = n * shape.out_h() * shape.out_w();
  if (grad_out_partials.sums != nullptr &&
      (grad_out_partials.rows != windows || grad_out_partials.columns != shape.channels ||
       grad_out_partials.splits < 2 || grad_out_partials.splits > kMaxSplitsAddedInOrder))
    throw Error(ExitCode::kFailure, "internal error: a max-pool's output gradient in " +
                                        std::to_string(grad_out_partials.splits) + " split partials of " +
                                        std::to_string(grad_out_partials.rows) + " x " +
                                        std::to_string(grad_out_partials.columns) + " for " +
                                        std::to_string(windows) + " windows of " + std::to_string(shape.channels) +
                                        " channels");
  const PoolGradOut from{grad_out, grad_out_partials};
  if (grad_in.precision == Precision::kBf16)
    launch_maxpool_backward_staged<Precision::kBf16>(grad_in, from, argmax, pooled_out, g, shape.channels, stream);
  else
    launch_maxpool_backward_staged<Precision::kTf32>(grad_in, from, argmax, pooled_out, g, shape.channels, stream);
  CNN_CHECK_LAUNCH();
}

void maxpool_forward(float* out, std::int32_t* argmax, const float* in, std::int64_t n, const PoolShape& shape,
                     cudaStream_t stream) {
  if (n <= 0) return;
  const PoolGeometry g = pool_geometry(shape, n);
  launch_dependent(maxpool_forward_kernel, grid_for(g.total_out), kBlockThreads, 0, stream, out, argmax, in, g);
  CNN_CHECK_LAUNCH();
}

void maxpool_forward_staged(float* out, std::int32_t* argmax, const StagedTensor& out_staged, const float* in,
                            std::int64_t n, const PoolShape& shape, cudaStream_t stream) {
  if (n <= 0) return;
  // Its kernel writes the NHWC layout of its own output [C, OH, OW] (channels padded).
  if (out_staged.channels_padded != staged_channels(shape.channels, out_staged.precision))
    throw Error(ExitCode::kFailure, "internal error: a max-pool's staged output in another layout");
  const PoolGeometry g = pool_geometry(shape, n);
  const int windows = g.total_out / shape.channels;  // n * OH * OW
  check_int_range(std::int64_t{windows} * out_staged.channels_padded, "a staged max-pool output");
  const dim3 grid = PoolTile::grid(windows, out_staged.channels_padded);
  auto* staged = reinterpret_cast<uint4*>(out_staged.words);
  if (out_staged.precision == Precision::kBf16)
    launch_dependent(maxpool_forward_staged_kernel<Precision::kBf16>, grid, kBlockThreads, 0, stream, out, argmax,
                     staged, in, g, shape.channels, out_staged.channels_padded, windows);
  else
    launch_dependent(maxpool_forward_staged_kernel<Precision::kTf32>, grid, kBlockThreads, 0, stream, out, argmax,
                     staged, in, g, shape.channels, out_staged.channels_padded, windows);
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

  bool can_be_pooled_before() const override { return layer_.pool.size == 2 && layer_.pool.stride == 2; }
  std::int32_t* pool_argmax() const override { return argmax_.get(); }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    if (t.pooled_before) return;  // the conv before wrote the output, argmax and staged words
    if (t.out_staged.words != nullptr)
      maxpool_forward_staged(t.out, argmax_.get(), t.out_staged, t.in, batch.n, layer_.pool, shared_.stream);
    else
      maxpool_forward(t.out, argmax_.get(), t.in, batch.n, layer_.pool, shared_.stream);
  }

  // It can write a staged conv's input as well (OpTensors::out_staged).
  bool writes_staged_output(const StagedTensor& into) const override {
    return is_staged_layout_of(into, layer_.out);
  }

  // Tiled windows can write a staged conv's output gradient themselves (OpTensors::grad_in_staged).
  bool writes_staged_input_grad() const override { return layer_.pool.size == layer_.pool.stride; }

  // Its staged backward (only) can add its output gradient from the conv after's split partials
  // (OpTensors::grad_out_partials); the backend hands them over only where it writes staged.
  bool reads_split_output_grad() const override { return writes_staged_input_grad(); }

  // A ReLU before the pool masks through the pool's output (see maxpool_backward_masked).
  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter&) override {
    const float* pooled_out = t.input_is_relu ? t.out : nullptr;
    if (t.grad_in_staged.words != nullptr)
      maxpool_backward_masked_staged(t.grad_in_staged, t.grad_out, t.grad_out_partials, argmax_.get(), pooled_out,
                                     batch.n, layer_.pool, shared_.stream);
    else if (t.grad_out_partials.sums != nullptr)
      throw Error(ExitCode::kFailure,
                  "internal error: a max-pool's output gradient in split partials, its own not staged");
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
