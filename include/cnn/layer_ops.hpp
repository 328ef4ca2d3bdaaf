// The layer operations of a general network (--model SPEC) on the CPU, over a batch of n samples in
// NCHW layout. Each has a CUDA twin in kernels/layers/conv.cu, fc.cu, relu.cu and maxpool.cu, declared
// (and avgpool.cu, dropout.cu) in kernels/ops/layer_ops.hpp with the same name and argument order (namespace cnn::cuda, device
// pointers, plus a trailing cudaStream_t).
//
// Same conventions as include/cnn/ops.hpp: backward functions ACCUMULATE (+=) into parameter
// gradients, so a caller can sum gradients over several micro-batches; they OVERWRITE activation
// gradients. Fully connected layers, softmax cross-entropy and the input gather are the ops of
// ops.hpp (fc_forward / fc_backward / softmax_cross_entropy / gather_normalize), unchanged.
//
// Every op is deterministic: the same inputs give the same bits, whatever thread calls it.
#pragma once

#include <cstdint>

#include "cnn/dropout_mask.hpp"

namespace cnn {

// A 2-D convolution: input C x H x W, `filters` output maps, square kernel, zero padding `pad` on
// every side, the same `stride` in both directions.
struct ConvShape {
  int channels = 0;
  int height = 0;
  int width = 0;
  int filters = 0;
  int kernel = 0;
  int stride = 1;
  int pad = 0;

  int out_h() const { return (height + 2 * pad - kernel) / stride + 1; }
  int out_w() const { return (width + 2 * pad - kernel) / stride + 1; }
  std::int64_t in_size() const { return static_cast<std::int64_t>(channels) * height * width; }
  std::int64_t out_size() const { return static_cast<std::int64_t>(filters) * out_h() * out_w(); }
  std::int64_t weight_size() const { return static_cast<std::int64_t>(filters) * channels * kernel * kernel; }
};

// A max-pool over `size` x `size` windows moved by `stride` (which may differ from size: windows
// overlap when stride < size), no padding; windows that would cross the border are dropped.
struct PoolShape {
  int channels = 0;
  int height = 0;
  int width = 0;
  int size = 2;
  int stride = 2;

  int out_h() const { return (height - size) / stride + 1; }
  int out_w() const { return (width - size) / stride + 1; }
  std::int64_t in_size() const { return static_cast<std::int64_t>(channels) * height * width; }
  std::int64_t out_size() const { return static_cast<std::int64_t>(channels) * out_h() * out_w(); }
};

//   out[s,f,y,x] = bias[f] + sum_{c,i,j} weight[f,c,i,j] * in[s, c, y*stride+i-pad, x*stride+j-pad]
// (terms outside the input are zero).
void conv2d_forward(float* out /*[n,F,OH,OW]*/, const float* in /*[n,C,H,W]*/, const float* weight /*[F,C,K,K]*/,
                    const float* bias /*[F]*/, std::int64_t n, const ConvShape& shape);

//   grad_in[s,c,h,w]    = sum over (f,y,x,i,j) with h = y*stride+i-pad, w = x*stride+j-pad of
//                         grad_out[s,f,y,x] * weight[f,c,i,j]          (skipped when grad_in is null)
//   grad_weight[f,c,i,j] += sum_{s,y,x} grad_out[s,f,y,x] * in[s, c, y*stride+i-pad, x*stride+j-pad]
//   grad_bias[f]        += sum_{s,y,x} grad_out[s,f,y,x]
void conv2d_backward(float* grad_in /*[n,C,H,W] or null*/, float* grad_weight /*[F,C,K,K]*/,
                     float* grad_bias /*[F]*/, const float* grad_out /*[n,F,OH,OW]*/, const float* in /*[n,C,H,W]*/,
                     const float* weight /*[F,C,K,K]*/, std::int64_t n, const ConvShape& shape);

// out[i] = max(0, in[i]) over `count` floats (count = n * per-sample size). out may equal in.
void relu_forward(float* out, const float* in, std::int64_t count);

// grad_in[i] = out[i] > 0 ? grad_out[i] : 0, the mask taken from the forward OUTPUT (so in-place
// forward is fine). grad_in may equal grad_out.
void relu_backward(float* grad_in, const float* grad_out, const float* out, std::int64_t count);

//   out[s,c,py,px] = max over the window (py*stride + a, px*stride + b), a,b in [0,size)
//   argmax[s,c,py,px] = (py*stride + a) * W + (px*stride + b) of the winner, an index into the
//                       sample's channel plane; the first maximum in row-major window order wins.
void maxpool_forward(float* out /*[n,C,OH,OW]*/, std::int32_t* argmax /*[n,C,OH,OW]*/, const float* in /*[n,C,H,W]*/,
                     std::int64_t n, const PoolShape& shape);

// grad_in[s,c,h,w] = sum of grad_out[s,c,py,px] over the windows whose winner is (h,w) (several when
// windows overlap, added in row-major (py, px) order; zero for positions that never won).
// Overwrites all of grad_in.
void maxpool_backward(float* grad_in /*[n,C,H,W]*/, const float* grad_out /*[n,C,OH,OW]*/,
                      const std::int32_t* argmax /*[n,C,OH,OW]*/, std::int64_t n, const PoolShape& shape);

// An average pool: windows of window_h x window_w moved by `stride`, no padding, windows that would
// cross the border dropped (maxpool's rule). avgpool<K>[/s<S>] is K x K at stride S; the global
// avgpool is one window of the whole H x W plane (stride 1), so its output is C x 1 x 1.
struct AvgPoolShape {
  int channels = 0;
  int height = 0;
  int width = 0;
  int window_h = 2;
  int window_w = 2;
  int stride = 2;
  bool global = false;  // the token was avgpool alone: the window is the whole plane, whatever its size

  int out_h() const { return (height - window_h) / stride + 1; }
  int out_w() const { return (width - window_w) / stride + 1; }
  // 1 / (window_h * window_w): each window's sum is multiplied by it, each window's gradient too.
  float scale() const { return 1.0f / static_cast<float>(window_h * window_w); }
  std::int64_t in_size() const { return static_cast<std::int64_t>(channels) * height * width; }
  std::int64_t out_size() const { return static_cast<std::int64_t>(channels) * out_h() * out_w(); }
};

//   out[s,c,py,px] = (sum over the window (py*stride + a, px*stride + b), a < window_h, b < window_w,
//                     in row-major order) * scale()
void avgpool_forward(float* out /*[n,C,OH,OW]*/, const float* in /*[n,C,H,W]*/, std::int64_t n,
                     const AvgPoolShape& shape);

// grad_in[s,c,h,w] = (sum over the windows (py, px) that hold (h,w), in row-major (py, px) order, of
// grad_out[s,c,py,px]) * scale(); zero for pixels no window covers. Overwrites all of grad_in. Each
// pixel gathers its own sum (no scatter), so the CUDA twin adds in the same order.
void avgpool_backward(float* grad_in /*[n,C,H,W]*/, const float* grad_out /*[n,C,OH,OW]*/, std::int64_t n,
                      const AvgPoolShape& shape);

// Inverted dropout over n samples of `size` floats, the samples standing from origin.first_sample
// of the global batch: out[s,e] = in[s,e] * dropout_factor(draw, origin.step_key, first_sample + s, e)
// (0 or 1 / (1 - P); dropout_mask.hpp). out may equal in.
void dropout_forward(float* out, const float* in, std::int64_t n, std::int64_t size, const DropoutDraw& draw,
                     const MaskOrigin& origin);

// grad_in = grad_out times the same factors. grad_in may equal grad_out.
void dropout_backward(float* grad_in, const float* grad_out, std::int64_t n, std::int64_t size,
                      const DropoutDraw& draw, const MaskOrigin& origin);

// Batch norm (src/layers/bn.cpp) over n samples of C channels of `spatial` (H*W) values each, NCHW.
inline constexpr double kBatchNormEps = 1e-5;
inline constexpr float kBatchNormMomentum = 0.1f;  // of the running statistics, as PyTorch

// sums[c] = sum of x over the samples and positions of channel c, sums[C + c] = sum of x^2, in double,
// sample by sample (the order every backend's part follows). Overwrites sums[0 .. 2C).
void bn_channel_sums(double* sums, const float* x, std::int64_t n, std::int64_t channels, std::int64_t spatial);

// mean and 1 / sqrt(var + eps) per channel from sums (bn_channel_sums over `count` values per
// channel, var biased). running != nullptr: also moves running (means [C], then variances [C]) by
// momentum towards the mean and the unbiased variance.
void bn_statistics(float* mean, float* inv_std, const double* sums, double count, std::int64_t channels,
                   float* running, float momentum);

// Evaluation's statistics: mean and 1 / sqrt(var + eps) from the running ones.
void bn_running_statistics(float* mean, float* inv_std, const float* running, std::int64_t channels);

// y = gamma * (x - mean) * inv_std + beta. y may equal x.
void bn_normalize(float* y, const float* x, const float* mean, const float* inv_std, const float* gamma,
                  const float* beta, std::int64_t n, std::int64_t channels, std::int64_t spatial);

// sums[c] = sum of grad_y (d beta), sums[C + c] = sum of grad_y * xhat (d gamma), xhat = (x - mean) * inv_std,
// in double. Overwrites sums[0 .. 2C).
void bn_gradient_sums(double* sums, const float* grad_y, const float* x, const float* mean, const float* inv_std,
                      std::int64_t n, std::int64_t channels, std::int64_t spatial);

// grad_x = gamma * inv_std * (grad_y - sums[c] / count - xhat * sums[C + c] / count), sums those of
// bn_gradient_sums over the whole batch the statistics came from (`count` values per channel).
void bn_input_gradient(float* grad_x, const float* grad_y, const float* x, const float* mean, const float* inv_std,
                       const float* gamma, const double* sums, double count, std::int64_t n, std::int64_t channels,
                       std::int64_t spatial);

}  // namespace cnn
