// The conv layer on the device, the twin of src/layers/conv.cpp: its kernels and its op.
//
// The convolution's layer operations on the device: the planned forms of layer_ops.hpp
// (conv2d_forward_planned, conv2d_backward_data, conv2d_backward_weights) and the twins conv2d_forward
// / conv2d_backward of src/. Each is an implicit matrix product (implicit_gemm.cuh): the loaders below
// decode a product's (row, k) into the layer's tensors, the stores put each result in place. The input
// gradient by columns ends with the col2im gather below. The plans come from layer_plans.cu.
//
// The conv op (a convolution, its ReLU folded into the store when relu_after): the planned forms of
// layer_ops.hpp, with the launch shape fixed once per batch size (ProductOp, device_op.hpp); in tf32
// and bf16 the staged forms of conv_tensor_core.cu, which reuse this file's stores through
// conv_products.cuh.
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/device_op.hpp"
#include "cuda/launch.hpp"
#include "cuda/stream_scratch.hpp"
#include "ops/layer_ops.hpp"
#include "ops/conv_products.cuh"
#include "ops/layer_ops_gemm.cuh"

namespace cnn::cuda {

// ---- the kernels

namespace {

// An output position (s, oy, ox) of the convolution: the top-left input pixel of its window.
struct Position {
  std::int64_t sample;  // s * C*H*W
  int y0, x0;           // oy*stride - pad, ox*stride - pad (kFar: none)
};
// A tap (c, i, j) of the kernel: its offset in one sample's input relative to the window origin.
struct Tap {
  int offset;  // c*H*W + i*W + j
  int i, j;    // kFar: none
};

__device__ __forceinline__ Position decode_position(const ConvGeometry& g, int p, int positions) {
  if (p >= positions) return {0, kFar, kFar};
  const int s = g.by_ohw.div(p);
  const int r = p - s * g.OHW;
  const int oy = g.by_ow.div(r);
  const int ox = r - oy * g.OW;
  return {s * g.CHW, oy * g.stride - g.pad, ox * g.stride - g.pad};
}

__device__ __forceinline__ Tap decode_tap(const ConvGeometry& g, int q) {
  if (q >= g.C * g.KK) return {0, kFar, kFar};
  const int c = g.by_kk.div(q);
  const int r = q - c * g.KK;
  const int i = g.by_ks.div(r);
  const int j = r - i * g.KS;
  return {c * g.HW + i * g.W + j, i, j};
}

__device__ __forceinline__ float input_at(const ConvGeometry& g, const float* __restrict__ in, const Position& p,
                                          const Tap& t) {
  const int y = p.y0 + t.i;
  const int x = p.x0 + t.j;
  if (static_cast<unsigned>(y) >= static_cast<unsigned>(g.H) || static_cast<unsigned>(x) >= static_cast<unsigned>(g.W))
    return 0.0f;
  return __ldg(in + p.sample + p.y0 * g.W + p.x0 + t.offset);
}

// Forward A[m = (s,oy,ox), k = (c,i,j)]: the input window (im2col, never stored).
struct ConvForwardA {
  static constexpr bool kKContiguous = false;
  ConvGeometry g;
  const float* in;
  int positions;  // n*OH*OW
  using Fixed = Position;
  using Step = Tap;
  __device__ __forceinline__ Fixed fixed(int m) const { return decode_position(g, m, positions); }
  __device__ __forceinline__ Step step(int k) const { return decode_tap(g, k); }
  __device__ __forceinline__ float load(const Fixed& p, const Step& t) const { return input_at(g, in, p, t); }
};

// Weight-gradient B[k = (s,oy,ox), n = (c,i,j) or the bias column C*K*K]: the same im2col, transposed.
struct ConvWgradB {
  static constexpr bool kKContiguous = true;
  ConvGeometry g;
  const float* in;
  int positions;
  struct Fixed {
    Tap tap;
    int ones;  // the bias column
  };
  using Step = Position;
  __device__ __forceinline__ Fixed fixed(int q) const { return {decode_tap(g, q), q == g.C * g.KK ? 1 : 0}; }
  __device__ __forceinline__ Step step(int p) const { return decode_position(g, p, positions); }
  __device__ __forceinline__ float load(const Fixed& f, const Step& p) const {
    if (f.ones) return p.y0 != kFar ? 1.0f : 0.0f;
    return input_at(g, in, p, f.tap);
  }
};

// Weight-gradient A[m = f, k = (s,oy,ox)] = grad_out[s, f, oy, ox].
struct ConvWgradA {
  static constexpr bool kKContiguous = true;
  ConvGeometry g;
  const float* grad_out;
  int positions;
  using Fixed = int;               // f*OH*OW, or -1
  using Step = std::int64_t;       // s*F*OH*OW + (oy*OW + ox), or -1
  __device__ __forceinline__ Fixed fixed(int f) const { return f < g.F ? f * g.OHW : -1; }
  __device__ __forceinline__ Step step(int p) const {
    if (p >= positions) return -1;
    const int s = g.by_ohw.div(p);
    return s * g.FOHW + (p - s * g.OHW);
  }
  __device__ __forceinline__ float load(Fixed f, Step p) const {
    return f >= 0 && p >= 0 ? __ldg(grad_out + p + f) : 0.0f;
  }
};

// Input-gradient A[m = (s,h,w), k = (f,i,j)] = grad_out[s, f, oy, ox] where oy*stride = h + pad - i
// and ox*stride = w + pad - j (zero when that is not a whole output position).
struct ConvDgradA {
  static constexpr bool kKContiguous = false;
  ConvGeometry g;
  const float* grad_out;
  int pixels;  // n*H*W
  struct Fixed {
    std::int64_t sample;  // s*F*OH*OW
    int yp, xp;           // h + pad, w + pad (-kFar: none)
  };
  struct Step {
    int offset;  // f*OH*OW
    int i, j;    // kFar: none
  };
  __device__ __forceinline__ Fixed fixed(int m) const {
    if (m >= pixels) return {0, -kFar, -kFar};
    const int s = g.by_hw.div(m);
    const int r = m - s * g.HW;
    const int h = g.by_w.div(r);
    return {s * g.FOHW, h + g.pad, r - h * g.W + g.pad};
  }
  __device__ __forceinline__ Step step(int k) const {
    if (k >= g.F * g.KK) return {0, kFar, kFar};
    const int f = g.by_kk.div(k);
    const int r = k - f * g.KK;
    const int i = g.by_ks.div(r);
    return {f * g.OHW, i, r - i * g.KS};
  }
  __device__ __forceinline__ float load(const Fixed& p, const Step& t) const {
    int oy = p.yp - t.i;
    int ox = p.xp - t.j;
    if (oy < 0 || ox < 0) return 0.0f;
    if (g.stride != 1) {
      if (oy % g.stride != 0 || ox % g.stride != 0) return 0.0f;
      oy /= g.stride;
      ox /= g.stride;
    }
    if (oy >= g.OH || ox >= g.OW) return 0.0f;
    return __ldg(grad_out + p.sample + t.offset + oy * g.OW + ox);
  }
};

// Input-gradient B[k = (f,i,j), n = c] = weight[f, c, i, j].
struct ConvDgradB {
  static constexpr bool kKContiguous = true;
  ConvGeometry g;
  const float* weight;
  using Fixed = int;  // c*K*K, or -1
  using Step = int;   // f*C*K*K + i*K + j, or -1
  __device__ __forceinline__ Fixed fixed(int c) const { return c < g.C ? c * g.KK : -1; }
  __device__ __forceinline__ Step step(int k) const {
    if (k >= g.F * g.KK) return -1;
    const int f = g.by_kk.div(k);
    return f * g.C * g.KK + (k - f * g.KK);
  }
  __device__ __forceinline__ float load(Fixed c, Step k) const { return c >= 0 && k >= 0 ? __ldg(weight + c + k) : 0.0f; }
};

// Input gradient by columns, A[m = (s,oy,ox), k = f] = grad_out[s, f, oy, ox]: consecutive m of one
// sample are adjacent, so the lanes (walking m) read whole rows; k only adds f*OH*OW.
struct ColumnsGradA {
  static constexpr bool kKContiguous = false;
  ConvGeometry g;
  const float* grad_out;
  int positions;  // n*OH*OW
  using Fixed = int;  // s*F*OH*OW + oy*OW + ox, or -1
  using Step = int;   // f*OH*OW, or -1
  __device__ __forceinline__ Fixed fixed(int m) const {
    if (m >= positions) return -1;
    const int s = g.by_ohw.div(m);
    return s * static_cast<int>(g.FOHW) + (m - s * g.OHW);
  }
  __device__ __forceinline__ Step step(int f) const { return f < g.F ? f * g.OHW : -1; }
  __device__ __forceinline__ float load(Fixed m, Step f) const {
    return m >= 0 && f >= 0 ? __ldg(grad_out + m + f) : 0.0f;
  }
};

// ---- stores ---------------------------------------------------------------------------------------

// dcol[n = (c,i,j), m = (s,oy,ox)]: tap-major, so the gather below reads consecutive positions.
struct ColumnsStore {
  float* columns;
  int positions;
  __device__ __forceinline__ void operator()(int m, int q, float v) const {
    columns[static_cast<std::int64_t>(q) * positions + m] = v;
  }
};

// ---- col2im gather --------------------------------------------------------------------------------

// col2im: a thread per input pixel (s, c, h, w) adds the columns of the taps (i, j) whose window
// covers it, in row-major tap order (a fixed order: no atomics), then applies the ReLU mask.
// Neighbouring lanes take neighbouring w, hence neighbouring output positions of the same tap.
// kKS > 0 fixes the kernel size at compile time: all taps' loads are issued before the first add
// (predicated), instead of one dependent load per loop trip; the sum order stays the same.
// relu_out may be null (no ReLU to fold in).
template <int kKS>
__global__ void gather_columns_kernel(float* __restrict__ grad_in, const float* __restrict__ columns,
                                      const float* __restrict__ relu_out, ConvGeometry g, int pixels, int positions) {
  start_after_previous_kernel();
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < pixels; e += gridDim.x * blockDim.x) {
    const auto [plane, r, h, w] = split_plane_index(e, g.by_hw, g.by_w);  // plane = s*C + c
    const int s = plane / g.C;
    const int c = plane - s * g.C;
    const float* tap_columns = columns + static_cast<std::int64_t>(c) * g.KK * positions + s * g.OHW;
    // Output row (column) of tap i (j), or -1 where the tap's window does not cover the pixel.
    auto output_index = [&](int numerator, int extent) {
      if (numerator < 0) return -1;
      if (g.stride != 1) {
        if (numerator % g.stride != 0) return -1;
        numerator /= g.stride;
      }
      return numerator < extent ? numerator : -1;
    };
    float sum = 0.0f;
    if constexpr (kKS > 0) {
      int oy[kKS], ox[kKS];
#pragma unroll
      for (int i = 0; i < kKS; ++i) oy[i] = output_index(h + g.pad - i, g.OH);
#pragma unroll
      for (int j = 0; j < kKS; ++j) ox[j] = output_index(w + g.pad - j, g.OW);
      float v[kKS][kKS];
#pragma unroll
      for (int i = 0; i < kKS; ++i)
#pragma unroll
        for (int j = 0; j < kKS; ++j)
          v[i][j] = oy[i] >= 0 && ox[j] >= 0
                        ? __ldg(tap_columns + static_cast<std::int64_t>(i * kKS + j) * positions + oy[i] * g.OW + ox[j])
                        : 0.0f;
#pragma unroll
      for (int i = 0; i < kKS; ++i)
#pragma unroll
        for (int j = 0; j < kKS; ++j)
          if (oy[i] >= 0 && ox[j] >= 0) sum += v[i][j];
    } else {
      for (int i = 0; i < g.KS; ++i) {
        const int oy = output_index(h + g.pad - i, g.OH);
        if (oy < 0) continue;
        for (int j = 0; j < g.KS; ++j) {
          const int ox = output_index(w + g.pad - j, g.OW);
          if (ox >= 0) sum += __ldg(tap_columns + static_cast<std::int64_t>(i * g.KS + j) * positions + oy * g.OW + ox);
        }
      }
    }
    if (relu_out != nullptr && !(relu_out[e] > 0.0f)) sum = 0.0f;
    grad_in[e] = sum;
  }
}

}  // namespace

void conv2d_forward_planned(const GemmPlan& plan, float* out, const float* in, const float* weight, const float* bias,
                            std::int64_t n, const ConvShape& shape, bool relu, float* workspace, cudaStream_t stream) {
  if (n <= 0) return;
  const ConvGeometry g(shape);
  const ConvForwardA a{g, in, static_cast<int>(n * g.OHW)};
  StridedLoader<true> b;
  b.p = weight;
  b.rows = g.F;
  b.depth = g.C * g.KK;
  b.ld_mn = g.C * g.KK;
  b.ld_k = 1;
  launch_either(relu, plan, a, b, ConvForwardStore<true>{out, bias, g.by_ohw, g.OHW, g.F, {}},
                ConvForwardStore<false>{out, bias, g.by_ohw, g.OHW, g.F, {}}, workspace, stream);
}

void conv2d_backward_data(const LayerPlans& plans, float* grad_in, const float* grad_out, const float* weight,
                          const float* relu_out, std::int64_t n, const ConvShape& shape, float* workspace,
                          cudaStream_t stream) {
  if (n <= 0) return;
  const ConvGeometry g(shape);
  if (!plans.dgrad_by_columns) {
    const ConvDgradA a{g, grad_out, static_cast<int>(n * g.HW)};
    const ConvDgradB b{g, weight};
    launch_either(relu_out != nullptr, plans.dgrad, a, b, ConvDgradStore<true>{grad_in, relu_out, g.by_hw, g.HW, g.C},
                  ConvDgradStore<false>{grad_in, nullptr, g.by_hw, g.HW, g.C}, workspace, stream);
    return;
  }
  const int positions = static_cast<int>(n * g.OHW);
  const int taps = g.C * g.KK;
  StridedLoader<false> b;  // weight[f, (c,i,j)] as [k = f, n = (c,i,j)]
  b.p = weight;
  b.rows = taps;
  b.depth = g.F;
  b.ld_mn = 1;
  b.ld_k = taps;
  launch_gemm(plans.dgrad, ColumnsGradA{g, grad_out, positions}, b, ColumnsStore{workspace, positions}, nullptr,
              stream);
  const int pixels = static_cast<int>(n * g.C * g.HW);
  const unsigned blocks = grid_for(pixels);
  if (g.KS == 3)
    launch_dependent(gather_columns_kernel<3>, blocks, kBlockThreads, 0, stream, grad_in, workspace, relu_out, g,
                     pixels, positions);
  else
    launch_dependent(gather_columns_kernel<0>, blocks, kBlockThreads, 0, stream, grad_in, workspace, relu_out, g,
                     pixels, positions);
  CNN_CHECK_LAUNCH();
}

void conv2d_backward_weights(const GemmPlan& plan, float* grad_weight, float* grad_bias, const float* grad_out,
                             const float* in, std::int64_t n, const ConvShape& shape, bool accumulate,
                             float* workspace, cudaStream_t stream) {
  if (n <= 0) return;
  const ConvGeometry g(shape);
  const int positions = static_cast<int>(n * g.OHW);
  launch_gemm(plan, ConvWgradA{g, grad_out, positions}, ConvWgradB{g, in, positions},
              WeightGradStore{grad_weight, grad_bias, g.C * g.KK, accumulate}, workspace, stream);
}

// ---- twins ----------------------------------------------------------------------------------------

void conv2d_forward(float* out, const float* in, const float* weight, const float* bias, std::int64_t n,
                    const ConvShape& shape, cudaStream_t stream) {
  if (n <= 0) return;
  const LayerPlans plans = plan_conv(shape, n, multiprocessor_count());
  StreamScratch<float> workspace(plans.forward.workspace_floats(), stream);
  conv2d_forward_planned(plans.forward, out, in, weight, bias, n, shape, false, workspace.get(), stream);
  workspace.release();
}

void conv2d_backward(float* grad_in, float* grad_weight, float* grad_bias, const float* grad_out, const float* in,
                     const float* weight, std::int64_t n, const ConvShape& shape, cudaStream_t stream) {
  if (n <= 0) return;
  const LayerPlans plans = plan_conv(shape, n, multiprocessor_count());
  StreamScratch<float> workspace(plans.workspace_floats(), stream);
  if (grad_in != nullptr)
    conv2d_backward_data(plans, grad_in, grad_out, weight, nullptr, n, shape, workspace.get(), stream);
  conv2d_backward_weights(plans.wgrad, grad_weight, grad_bias, grad_out, in, n, shape, true, workspace.get(), stream);
  workspace.release();
}

// ---- the op

namespace {

class ConvOp final : public ProductOp {
 public:
  ConvOp(const Op& op, const Network& network, OpShared& shared) : ProductOp(op, network, shared) {}

  // A 2x2/2 max-pool after the conv's folded ReLU: the staged forward can pool in its store.
  void offer_pool_after() override { pool_follows_ = relu_; }

  bool pools_output(std::int64_t n) const override { return plans_for(n).pooled_forward.m > 0; }

  // Its split input gradient, in the main stream's workspace, where nothing else runs between its
  // product and the op before's backward.
  SplitPartials input_grad_partials(std::int64_t n) const override {
    return conv_input_grad_partials(plans_for(n), shared_.workspace.get(), n, layer_.conv);
  }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    const LayerPlans& plans = plans_for(batch.n);
    const bool weights_staged = weights_staged_at_start();
    if (t.pooled.out != nullptr)
      conv2d_forward_staged_pooled(plans, t.pooled, t.in, weight(), bias(), batch.n, layer_.conv, staged(),
                                   t.in_staged, weights_staged, shared_.stream);
    else if (plans.staged)
      conv2d_forward_staged(plans, t.out, t.out_staged, t.in, weight(), bias(), batch.n, layer_.conv, relu_, staged(),
                            t.in_staged, weights_staged, shared_.workspace.get(), shared_.stream);
    else
      conv2d_forward_planned(plans.forward, t.out, t.in, weight(), bias(), batch.n, layer_.conv, relu_,
                             shared_.workspace.get(), shared_.stream);
  }

  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter& ready) override {
    const LayerPlans& plans = plans_for(batch.n);
    const bool input_grad = t.grad_in != nullptr;
    const float* relu_out = t.input_is_relu ? t.in : nullptr;
    if (plans.staged) {
      // Staged on the main stream before the weight gradient forks off it: both products read them.
      // (Unless the op after has written it staged already: t.grad_out_staged.)
      if (!t.grad_out_staged) conv2d_stage_backward(plans, t.grad_out, batch.n, layer_.conv, staged(), shared_.stream);
      const OpShared::Place place = shared_.weight_grad_place(input_grad);
      conv2d_backward_weights_staged(plans, grad_weight(), grad_bias(), batch.n, layer_.conv, false, staged(),
                                     place.workspace, place.stream);
      if (input_grad)
        conv2d_backward_data_staged(plans, t.grad_in, relu_out, batch.n, layer_.conv, staged(),
                                    shared_.workspace.get(), t.grad_in_partials, shared_.stream);
      report_ready(ready, place);
      return;
    }
    const OpShared::Place place = shared_.weight_grad_place(input_grad);
    conv2d_backward_weights(plans.wgrad, grad_weight(), grad_bias(), t.grad_out, t.in, batch.n, layer_.conv, false,
                            place.workspace, place.stream);
    if (input_grad)
      conv2d_backward_data(plans, t.grad_in, t.grad_out, weight(), relu_out, batch.n, layer_.conv,
                           shared_.workspace.get(), shared_.stream);
    report_ready(ready, place);
  }

 private:
  LayerPlans plan(std::int64_t n) const override {
    LayerPlans plans =
        plan_conv(layer_.conv, n, shared_.multiprocessors, kMaxColumnFloats, shared_.precision, shared_.wgmma);
    if (plans.staged && pool_follows_)
      plans.pooled_forward =
          plan_conv_pooled(layer_.conv, n, shared_.multiprocessors, shared_.precision, shared_.wgmma);
    return plans;
  }
  std::string forward_description(const LayerPlans& plans) const override {
    if (plans.pooled_forward.m == 0) return ProductOp::forward_description(plans);
    return plans.pooled_forward.describe() + " with the 2x2 max-pool in its store";
  }
  ConvShape staged_conv() const override { return layer_.conv; }
  bool staged_products() const override { return shared_.precision != Precision::kFp32; }

  bool pool_follows_ = false;  // offer_pool_after, before any plan
};

}  // namespace

std::unique_ptr<DeviceOp> make_conv_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<ConvOp>(op, network, shared);
}

}  // namespace cnn::cuda
