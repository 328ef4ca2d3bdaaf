// What the convolution's two product files share (kernels/layers/conv.cu, the fp32 and element
// forms; conv_tensor_core.cu, the staged tf32/bf16 forms): the shape with its dividers, and the stores
// of the forward (bias, ReLU) and of the input gradient (the ReLU mask).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cnn/layer_ops.hpp"
#include "ops/fast_div.cuh"
#include "ops/staged_layout.cuh"

namespace cnn::cuda {
// Internal to each file that includes this one (as layer_ops_gemm.cuh): the kernels instantiated on
// these types stay private to that file's module.
namespace {

// Marks an out-of-range row or k: a window origin or tap of kFar fails every bounds test below, also
// when both are out of range (2 * kFar still fits an int).
constexpr int kFar = 1 << 29;

// ConvShape with the dividers the index decoding needs.
struct ConvGeometry {
  int C, H, W, F, KS, stride, pad, OH, OW;
  int KK, OHW, HW;
  std::int64_t CHW, FOHW;
  FastDiv by_ohw, by_ow, by_kk, by_ks, by_hw, by_w;

  explicit ConvGeometry(const ConvShape& s)
      : C(s.channels), H(s.height), W(s.width), F(s.filters), KS(s.kernel), stride(s.stride), pad(s.pad),
        OH(s.out_h()), OW(s.out_w()), KK(s.kernel * s.kernel), OHW(s.out_h() * s.out_w()), HW(s.height * s.width),
        CHW(s.in_size()), FOHW(s.out_size()), by_ohw(OHW), by_ow(OW), by_kk(KK), by_ks(KS), by_hw(HW), by_w(W) {}
};

// out[s, f, oy, ox] = v + bias[f], through a ReLU when kRelu. m = (s, oy*OW + ox). kScatter (the
// staged forms, conv_tensor_core.cu): where staged.words, the same value also into the staged input of
// the op after (OpTensors::out_staged). The fp32 forms take no such test: with it their step was
// 1.1-1.7% slower (nvidia-h100-x1, 2026-11-28, docs/PERFORMANCE.md, the sixteenth part).
template <bool kRelu, bool kScatter = false>
struct ConvForwardStore {
  float* out;
  const float* bias;
  FastDiv by_ohw;
  int ohw, filters;
  StagedScatter staged;
  __device__ __forceinline__ void operator()(int m, int f, float v) const {
    const int s = by_ohw.div(m);
    float y = v + bias[f];
    if (kRelu) y = fmaxf(y, 0.0f);
    const int p = m - s * ohw;
    out[(static_cast<std::int64_t>(s) * filters + f) * ohw + p] = y;
    if constexpr (kScatter) {
      if (staged.words != nullptr) staged.put(s, f * ohw + p, y);
    }
  }
};

// grad_in[s, c, h, w] = v, zeroed where relu_out <= 0 when kMask. m = (s, h*W + w).
template <bool kMask>
struct ConvDgradStore {
  float* grad_in;
  const float* relu_out;
  FastDiv by_hw;
  int hw, channels;
  __device__ __forceinline__ void operator()(int m, int c, float v) const {
    const int s = by_hw.div(m);
    const std::int64_t e = (static_cast<std::int64_t>(s) * channels + c) * hw + (m - s * hw);
    if (kMask && !(relu_out[e] > 0.0f)) v = 0.0f;
    grad_in[e] = v;
  }
};

}  // namespace
}  // namespace cnn::cuda
