// The fully connected layer's planned forms of layer_ops.hpp (fc_forward_planned, fc_backward_data,
// fc_backward_weights): plain strided matrix products (implicit_gemm.cuh's StridedLoader) with the
// stores below, the bias and a neighbouring ReLU folded in. The plans come from layer_plans.cu.
#include <cstdint>

#include "ops/layer_ops.hpp"
#include "ops/layer_ops_gemm.cuh"

namespace cnn::cuda {
namespace {

// out[s, o] = v + bias[o] (ReLU when kRelu).
template <bool kRelu>
struct FcForwardStore {
  float* out;
  const float* bias;
  int outputs;
  __device__ __forceinline__ void operator()(int s, int o, float v) const {
    float y = v + bias[o];
    if (kRelu) y = fmaxf(y, 0.0f);
    out[static_cast<std::int64_t>(s) * outputs + o] = y;
  }
};

// grad_in[s, i] = v, zeroed where relu_out <= 0 when kMask.
template <bool kMask>
struct FcDgradStore {
  float* grad_in;
  const float* relu_out;
  int inputs;
  __device__ __forceinline__ void operator()(int s, int i, float v) const {
    const std::int64_t e = static_cast<std::int64_t>(s) * inputs + i;
    if (kMask && !(relu_out[e] > 0.0f)) v = 0.0f;
    grad_in[e] = v;
  }
};

}  // namespace

void fc_forward_planned(const GemmPlan& plan, float* out, const float* in, const float* weight, const float* bias,
                        std::int64_t n, std::int64_t in_features, std::int64_t out_features, bool relu,
                        float* workspace, cudaStream_t stream) {
  if (n <= 0) return;
  const int I = static_cast<int>(in_features), O = static_cast<int>(out_features);
  StridedLoader<true> a;  // in[s, i]
  a.p = in;
  a.rows = static_cast<int>(n);
  a.depth = I;
  a.ld_mn = I;
  a.ld_k = 1;
  StridedLoader<true> b;  // weight[o, i]
  b.p = weight;
  b.rows = O;
  b.depth = I;
  b.ld_mn = I;
  b.ld_k = 1;
  launch_either(relu, plan, a, b, FcForwardStore<true>{out, bias, O}, FcForwardStore<false>{out, bias, O}, workspace,
                stream);
}

void fc_backward_data(const GemmPlan& plan, float* grad_in, const float* grad_out, const float* weight,
                      const float* relu_out, std::int64_t n, std::int64_t in_features, std::int64_t out_features,
                      float* workspace, cudaStream_t stream) {
  if (n <= 0) return;
  const int I = static_cast<int>(in_features), O = static_cast<int>(out_features);
  StridedLoader<true> a;  // grad_out[s, o]
  a.p = grad_out;
  a.rows = static_cast<int>(n);
  a.depth = O;
  a.ld_mn = O;
  a.ld_k = 1;
  StridedLoader<false> b;  // weight[o, i] as [k = o, n = i]
  b.p = weight;
  b.rows = I;
  b.depth = O;
  b.ld_mn = 1;
  b.ld_k = I;
  launch_either(relu_out != nullptr, plan, a, b, FcDgradStore<true>{grad_in, relu_out, I},
                FcDgradStore<false>{grad_in, nullptr, I}, workspace, stream);
}

void fc_backward_weights(const GemmPlan& plan, float* grad_weight, float* grad_bias, const float* grad_out,
                         const float* in, std::int64_t n, std::int64_t in_features, std::int64_t out_features,
                         bool accumulate, float* workspace, cudaStream_t stream) {
  if (n <= 0) return;
  const int I = static_cast<int>(in_features), O = static_cast<int>(out_features);
  StridedLoader<false> a;  // grad_out[s, o] as [m = o, k = s]
  a.p = grad_out;
  a.rows = O;
  a.depth = static_cast<int>(n);
  a.ld_mn = 1;
  a.ld_k = O;
  StridedLoader<false> b;  // in[s, i] as [k = s, n = i], plus the bias column n = I of ones
  b.p = in;
  b.rows = I;
  b.depth = static_cast<int>(n);
  b.ones_row = I;
  b.ld_mn = 1;
  b.ld_k = I;
  launch_gemm(plan, a, b, WeightGradStore{grad_weight, grad_bias, I, accumulate}, workspace, stream);
}

}  // namespace cnn::cuda
