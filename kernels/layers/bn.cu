// The bn layer on the device, the twin of src/layers/bn.cpp: its kernels and its op.
//
// Per channel c over the batch slice's samples and positions (NCHW; after fc the shape is
// {features, 1, 1}, so a channel is a feature):
//   training:   y = gamma * (x - mean) * inv_std + beta, mean and the biased variance of the batch
//               (the global batch's unless --bn-local: the sums are exchanged over the ranks,
//               OpShared::statistics), the running statistics moved by momentum 0.1 towards the
//               mean and the unbiased variance;
//   evaluation: the same with the running statistics.
//   backward:   d beta = sum dy, d gamma = sum dy * xhat (this rank's, allreduced with the other
//               gradients), dx = gamma * inv_std * (dy - mean(dy) - xhat * mean(dy * xhat)) with
//               the means over the batch the statistics came from (exchanged like the forward's).
// Statistics in double; parameters and activations fp32 whatever --precision says.
//
// Each direction reads the activation twice: once for the per-channel sums, once to normalise (or to
// write dx). The sums run in an order fixed by the shape and the GPU model (ChannelGeometry): a
// channel is cut into `parts` ranges of its values, each summed by one block (each thread a strided
// subset, then a tree in shared memory), and a second kernel adds the parts in order. No atomics, so
// a rerun repeats the bits. The per-channel arithmetic and the elementwise roundings are those
// src/layers/bn.cpp writes, with explicitly rounded intrinsics (no contraction into fused
// multiply-adds, whatever nvcc would choose); the host compiler may still fuse some on the CPU
// (-march=native), and the sums differ in order, so the two agree to rounding, not bit for bit.
#include <algorithm>
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/device_op.hpp"
#include "cuda/launch.hpp"
#include "cuda/stream_scratch.hpp"
#include "dist/statistics_exchange.hpp"
#include "ops/fast_div.cuh"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {

// ---- the kernels

namespace {

constexpr int kBnThreads = 256;  // a power of two: the shared-memory tree halves it
// Blocks per multiprocessor the channel kernels aim for (a few waves), and the fewest values per
// thread a part is cut down to.
constexpr int kBnBlocksPerMultiprocessor = 4;
constexpr int kBnValuesPerThread = 8;

// Channel c's values are i in [0, per_channel), per_channel = n * spatial: sample i / spatial,
// position i % spatial, at ((sample * channels) + c) * spatial + position. Block (c, part) takes
// i in [part * part_len, (part + 1) * part_len). 32-bit indices: the launchers check the size.
struct ChannelGeometry {
  int channels = 0, spatial = 0, per_channel = 0;
  int parts = 1, part_len = 0;
  FastDiv by_spatial;
};

ChannelGeometry channel_geometry(std::int64_t n, std::int64_t channels, std::int64_t spatial) {
  check_int_range(n * channels * spatial, "a bn layer's input");
  ChannelGeometry g;
  g.channels = static_cast<int>(channels);
  g.spatial = static_cast<int>(spatial);
  g.per_channel = static_cast<int>(n * spatial);
  const std::int64_t wanted = ceil_div(std::int64_t{kBnBlocksPerMultiprocessor} * multiprocessor_count(), channels);
  const std::int64_t most = std::max<std::int64_t>(1, g.per_channel / (kBnThreads * kBnValuesPerThread));
  const std::int64_t parts = std::clamp<std::int64_t>(wanted, 1, most);
  g.part_len = static_cast<int>(std::max<std::int64_t>(1, ceil_div(g.per_channel, parts)));
  g.parts = static_cast<int>(std::max<std::int64_t>(1, ceil_div(g.per_channel, g.part_len)));  // none empty
  g.by_spatial = FastDiv(g.spatial);
  return g;
}

dim3 channel_grid(const ChannelGeometry& g) {
  return dim3(static_cast<unsigned>(g.channels), static_cast<unsigned>(g.parts));
}

__device__ __forceinline__ std::int64_t channel_value_at(const ChannelGeometry& g, int c, int i) {
  const int sample = g.by_spatial.div(i);
  return (static_cast<std::int64_t>(sample) * g.channels + c) * g.spatial + (i - sample * g.spatial);
}

// a and b summed over the block, in a fixed tree; the result in thread 0.
__device__ void block_sum(double& a, double& b) {
  __shared__ double shared_a[kBnThreads], shared_b[kBnThreads];
  shared_a[threadIdx.x] = a;
  shared_b[threadIdx.x] = b;
  __syncthreads();
  for (int half = kBnThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      shared_a[threadIdx.x] += shared_a[threadIdx.x + half];
      shared_b[threadIdx.x] += shared_b[threadIdx.x + half];
    }
    __syncthreads();
  }
  a = shared_a[0];
  b = shared_b[0];
}

// The forward's terms: x and x^2.
struct ValueTerms {
  const float* x;
  __device__ void begin_channel(int) {}
  __device__ void add(std::int64_t at, double& sum, double& squares) const {
    const double v = __ldg(x + at);
    sum += v;
    squares += v * v;
  }
};

// The backward's: dy and dy * xhat, xhat = (x - mean) * inv_std rounded in float as on the CPU.
struct GradientTerms {
  const float* grad_y;
  const float* x;
  const float* mean;
  const float* inv_std;
  float channel_mean = 0.0f, channel_inv_std = 0.0f;
  __device__ void begin_channel(int c) {
    channel_mean = mean[c];
    channel_inv_std = inv_std[c];
  }
  __device__ void add(std::int64_t at, double& dy, double& dy_xhat) const {
    const float g = __ldg(grad_y + at);
    dy += g;
    dy_xhat += static_cast<double>(g) * __fmul_rn(__fsub_rn(__ldg(x + at), channel_mean), channel_inv_std);
  }
};

// partial[c * parts + part] and partial[(channels + c) * parts + part]: block (c, part)'s two sums.
template <class Terms>
__global__ void __launch_bounds__(kBnThreads) bn_partial_sums_kernel(double* __restrict__ partial, Terms terms,
                                                                     ChannelGeometry g) {
  start_after_previous_kernel();
  const int c = blockIdx.x, part = blockIdx.y;
  terms.begin_channel(c);
  const int begin = part * g.part_len, end = min(begin + g.part_len, g.per_channel);
  double a = 0.0, b = 0.0;
  for (int i = begin + threadIdx.x; i < end; i += kBnThreads) terms.add(channel_value_at(g, c, i), a, b);
  block_sum(a, b);
  if (threadIdx.x == 0) {
    partial[static_cast<std::int64_t>(c) * g.parts + part] = a;
    partial[static_cast<std::int64_t>(g.channels + c) * g.parts + part] = b;
  }
}

// sums[c], sums[C + c]: the parts added in order. count >= 0: also sums[2C] = count. grad_beta,
// grad_gamma (may be null): overwritten with the float of the two sums (the backward's).
__global__ void bn_finish_sums_kernel(double* __restrict__ sums, const double* __restrict__ partial, int channels,
                                      int parts, double count, float* __restrict__ grad_beta,
                                      float* __restrict__ grad_gamma) {
  start_after_previous_kernel();
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < channels; c += gridDim.x * blockDim.x) {
    double a = 0.0, b = 0.0;
    for (int part = 0; part < parts; ++part) {
      a += partial[static_cast<std::int64_t>(c) * parts + part];
      b += partial[static_cast<std::int64_t>(channels + c) * parts + part];
    }
    sums[c] = a;
    sums[channels + c] = b;
    if (grad_beta != nullptr) grad_beta[c] = static_cast<float>(a);
    if (grad_gamma != nullptr) grad_gamma[c] = static_cast<float>(b);
  }
  if (count >= 0.0 && blockIdx.x == 0 && threadIdx.x == 0) sums[2 * channels] = count;
}

// bn_statistics of src/layers/bn.cpp, rounding for rounding.
__global__ void bn_statistics_kernel(float* __restrict__ mean, float* __restrict__ inv_std,
                                     const double* __restrict__ sums, int channels, float* __restrict__ running,
                                     float momentum, double eps) {
  start_after_previous_kernel();
  const double count = sums[2 * channels];
  const double keep = 1.0 - static_cast<double>(momentum);
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < channels; c += gridDim.x * blockDim.x) {
    const double m = __ddiv_rn(sums[c], count);
    const double var = fmax(0.0, __dsub_rn(__ddiv_rn(sums[channels + c], count), __dmul_rn(m, m)));
    mean[c] = static_cast<float>(m);
    inv_std[c] = static_cast<float>(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(var, eps))));
    if (running == nullptr) continue;
    const double unbiased = count > 1.0 ? __ddiv_rn(__dmul_rn(var, count), __dsub_rn(count, 1.0)) : var;
    running[c] = static_cast<float>(
        __dadd_rn(__dmul_rn(keep, static_cast<double>(running[c])), __dmul_rn(static_cast<double>(momentum), m)));
    running[channels + c] = static_cast<float>(__dadd_rn(__dmul_rn(keep, static_cast<double>(running[channels + c])),
                                                         __dmul_rn(static_cast<double>(momentum), unbiased)));
  }
}

__global__ void bn_running_statistics_kernel(float* __restrict__ mean, float* __restrict__ inv_std,
                                             const float* __restrict__ running, int channels, double eps) {
  start_after_previous_kernel();
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < channels; c += gridDim.x * blockDim.x) {
    mean[c] = running[c];
    inv_std[c] = static_cast<float>(
        __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(static_cast<double>(running[channels + c]), eps))));
  }
}

// y = x * scale + shift, scale = gamma * inv_std, shift = beta - mean * scale (the CPU's roundings).
__global__ void __launch_bounds__(kBnThreads) bn_normalize_kernel(float* __restrict__ y, const float* __restrict__ x,
                                                                  const float* __restrict__ mean,
                                                                  const float* __restrict__ inv_std,
                                                                  const float* __restrict__ gamma,
                                                                  const float* __restrict__ beta, ChannelGeometry g) {
  start_after_previous_kernel();
  const int c = blockIdx.x;
  const float scale = __fmul_rn(gamma[c], inv_std[c]);
  const float shift = __fsub_rn(beta[c], __fmul_rn(mean[c], scale));
  const int begin = blockIdx.y * g.part_len, end = min(begin + g.part_len, g.per_channel);
  for (int i = begin + threadIdx.x; i < end; i += kBnThreads) {
    const std::int64_t at = channel_value_at(g, c, i);
    y[at] = __fadd_rn(__fmul_rn(__ldg(x + at), scale), shift);
  }
}

// dx = scale * ((dy - mean_dy) - xhat * mean_dy_xhat), the means over `*count` values (the CPU's
// roundings); mask_by_input: x is a ReLU's output, and dx is taken before that ReLU (zero where x <= 0).
__global__ void __launch_bounds__(kBnThreads)
    bn_input_gradient_kernel(float* __restrict__ grad_x, const float* __restrict__ grad_y, const float* __restrict__ x,
                             const float* __restrict__ mean, const float* __restrict__ inv_std,
                             const float* __restrict__ gamma, const double* __restrict__ sums,
                             const double* __restrict__ count, bool mask_by_input, ChannelGeometry g) {
  start_after_previous_kernel();
  const int c = blockIdx.x;
  const double values = *count;
  const float mean_dy = static_cast<float>(__ddiv_rn(sums[c], values));
  const float mean_dy_xhat = static_cast<float>(__ddiv_rn(sums[g.channels + c], values));
  const float m = mean[c], s = inv_std[c];
  const float scale = __fmul_rn(gamma[c], s);
  const int begin = blockIdx.y * g.part_len, end = min(begin + g.part_len, g.per_channel);
  for (int i = begin + threadIdx.x; i < end; i += kBnThreads) {
    const std::int64_t at = channel_value_at(g, c, i);
    const float v = __ldg(x + at);
    const float xhat = __fmul_rn(__fsub_rn(v, m), s);
    const float value = __fmul_rn(scale, __fsub_rn(__fsub_rn(__ldg(grad_y + at), mean_dy), __fmul_rn(xhat, mean_dy_xhat)));
    grad_x[at] = mask_by_input && !(v > 0.0f) ? 0.0f : value;
  }
}

// The two launches of a channel sum: the parts into `partial` (2 * channels * parts doubles), then
// their ordered sum.
template <class Terms>
void channel_sums(double* sums, double* partial, const Terms& terms, const ChannelGeometry& g, double count,
                  float* grad_beta, float* grad_gamma, cudaStream_t stream) {
  launch_dependent(bn_partial_sums_kernel<Terms>, channel_grid(g), kBnThreads, 0, stream, partial, terms, g);
  CNN_CHECK_LAUNCH();
  launch_dependent(bn_finish_sums_kernel, grid_for(g.channels), kBlockThreads, 0, stream, sums, partial, g.channels,
                   g.parts, count, grad_beta, grad_gamma);
  CNN_CHECK_LAUNCH();
}

// The same with the parts in scratch from the stream-ordered allocator (the twins; the op keeps a
// buffer of its own, so that its captured step holds no allocation).
template <class Terms>
void channel_sums_in_scratch(double* sums, const Terms& terms, const ChannelGeometry& g, double count,
                             cudaStream_t stream) {
  StreamScratch<double> partial(2 * static_cast<std::int64_t>(g.channels) * g.parts, stream);
  channel_sums(sums, partial.get(), terms, g, count, nullptr, nullptr, stream);
  partial.release();
}

// bn_input_gradient, masked by the input where it is a ReLU's output.
void input_gradient(float* grad_x, const float* grad_y, const float* x, const float* mean, const float* inv_std,
                    const float* gamma, const double* sums, const double* count, bool mask_by_input, std::int64_t n,
                    std::int64_t channels, std::int64_t spatial, cudaStream_t stream) {
  if (n <= 0) return;
  const ChannelGeometry g = channel_geometry(n, channels, spatial);
  launch_dependent(bn_input_gradient_kernel, channel_grid(g), kBnThreads, 0, stream, grad_x, grad_y, x, mean, inv_std,
                   gamma, sums, count, mask_by_input, g);
  CNN_CHECK_LAUNCH();
}

}  // namespace

void bn_channel_sums(double* sums, const float* x, std::int64_t n, std::int64_t channels, std::int64_t spatial,
                     cudaStream_t stream) {
  if (n <= 0) return;
  channel_sums_in_scratch(sums, ValueTerms{x}, channel_geometry(n, channels, spatial), static_cast<double>(n * spatial),
                          stream);
}

void bn_statistics(float* mean, float* inv_std, const double* sums, std::int64_t channels, float* running,
                   float momentum, cudaStream_t stream) {
  check_int_range(2 * channels, "a bn layer's channels");
  launch_dependent(bn_statistics_kernel, grid_for(channels), kBlockThreads, 0, stream, mean, inv_std, sums,
                   static_cast<int>(channels), running, momentum, kBatchNormEps);
  CNN_CHECK_LAUNCH();
}

void bn_running_statistics(float* mean, float* inv_std, const float* running, std::int64_t channels,
                           cudaStream_t stream) {
  check_int_range(2 * channels, "a bn layer's channels");
  launch_dependent(bn_running_statistics_kernel, grid_for(channels), kBlockThreads, 0, stream, mean, inv_std, running,
                   static_cast<int>(channels), kBatchNormEps);
  CNN_CHECK_LAUNCH();
}

void bn_normalize(float* y, const float* x, const float* mean, const float* inv_std, const float* gamma,
                  const float* beta, std::int64_t n, std::int64_t channels, std::int64_t spatial, cudaStream_t stream) {
  if (n <= 0) return;
  const ChannelGeometry g = channel_geometry(n, channels, spatial);
  launch_dependent(bn_normalize_kernel, channel_grid(g), kBnThreads, 0, stream, y, x, mean, inv_std, gamma, beta, g);
  CNN_CHECK_LAUNCH();
}

void bn_gradient_sums(double* sums, const float* grad_y, const float* x, const float* mean, const float* inv_std,
                      std::int64_t n, std::int64_t channels, std::int64_t spatial, cudaStream_t stream) {
  if (n <= 0) return;
  channel_sums_in_scratch(sums, GradientTerms{grad_y, x, mean, inv_std}, channel_geometry(n, channels, spatial), -1.0,
                          stream);
}

void bn_input_gradient(float* grad_x, const float* grad_y, const float* x, const float* mean, const float* inv_std,
                       const float* gamma, const double* sums, const double* count, std::int64_t n,
                       std::int64_t channels, std::int64_t spatial, cudaStream_t stream) {
  input_gradient(grad_x, grad_y, x, mean, inv_std, gamma, sums, count, false, n, channels, spatial, stream);
}

// ---- the op

namespace {

// The batch's statistics live in the op between its forward and its backward (the same step, in
// stream order); evaluation overwrites them, which no step's backward reads any more.
class BatchNormOp final : public DeviceOp {
 public:
  BatchNormOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op),
        layer_(network.layers[op.first_layer]),
        channels_(layer_.in.channels),
        spatial_(static_cast<std::int64_t>(layer_.in.height) * layer_.in.width),
        shared_(shared),
        sums_(2 * channels_ + 1),
        gradient_sums_(2 * channels_),
        statistics_(2 * channels_) {
    out_size_ = layer_.in.size();
  }

  // The parts of the channel sums for a batch of n (the most of any batch size seen).
  Prepared prepare(std::int64_t n) override {
    const ChannelGeometry g = channel_geometry(n, channels_, spatial_);
    return Prepared{partial_.reserve(2 * channels_ * g.parts), 0};
  }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    float* mean = statistics_.get();
    float* inv_std = mean + channels_;
    if (!batch.training) {
      bn_running_statistics(mean, inv_std, running(), channels_, shared_.stream);
    } else {
      // The slice's sums and count, then (global statistics) every rank's added to them: all ranks
      // then normalise alike, and each moves its running statistics alike, once per step.
      channel_sums(sums_.get(), partial_.get(), ValueTerms{t.in}, channel_geometry(batch.n, channels_, spatial_),
                   static_cast<double>(batch.n * spatial_), nullptr, nullptr, shared_.stream);
      shared_.statistics->allreduce_sum(sums_.get(), sums_.size());
      bn_statistics(mean, inv_std, sums_.get(), channels_, running(), kBatchNormMomentum, shared_.stream);
    }
    bn_normalize(t.out, t.in, mean, inv_std, gamma(), beta(), batch.n, channels_, spatial_, shared_.stream);
  }

  // d gamma and d beta are this rank's sums (the gradient allreduce adds the ranks'); dx needs the
  // whole batch's, exchanged like the forward's. With no input gradient (nothing with parameters
  // before the layer, the same on every rank), nothing is exchanged.
  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter& ready) override {
    const float* mean = statistics_.get();
    const float* inv_std = mean + channels_;
    channel_sums(gradient_sums_.get(), partial_.get(), GradientTerms{t.grad_out, t.in, mean, inv_std},
                 channel_geometry(batch.n, channels_, spatial_), -1.0, shared_.grads + layer_.bias_offset,
                 shared_.grads + layer_.weight_offset, shared_.stream);
    const GradientReadyPoint range = param_range(layer_);
    ready.ready(range.offset, range.count, false);
    if (t.grad_in == nullptr) return;
    shared_.statistics->allreduce_sum(gradient_sums_.get(), gradient_sums_.size());
    input_gradient(t.grad_in, t.grad_out, t.in, mean, inv_std, gamma(), gradient_sums_.get(),
                   sums_.get() + 2 * channels_, t.input_is_relu, batch.n, channels_, spatial_, shared_.stream);
  }

  std::vector<GradientReadyPoint> ready_ranges() const override { return {param_range(layer_)}; }

 private:
  const float* gamma() const { return shared_.params + layer_.weight_offset; }
  const float* beta() const { return shared_.params + layer_.bias_offset; }
  float* running() const { return shared_.state + layer_.state_offset; }  // means [C], then variances [C]

  const Layer& layer_;
  const std::int64_t channels_, spatial_;
  OpShared& shared_;
  DeviceBuffer<double> sums_;           // the forward's: sum x [C], sum x^2 [C], the count of values per channel
  DeviceBuffer<double> gradient_sums_;  // the backward's: sum dy [C], sum dy * xhat [C]
  DeviceBuffer<float> statistics_;      // mean [C], then 1 / sqrt(var + eps) [C]
  DeviceBuffer<double> partial_;        // the channel sums' parts (ChannelGeometry), both directions'
};

}  // namespace

std::unique_ptr<DeviceOp> make_bn_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<BatchNormOp>(op, network, shared);
}

}  // namespace cnn::cuda
