// What the convolution and fully connected planned forms (layer_ops_conv.cu, layer_ops_fc.cu) share:
// the weight-gradient store, which puts the bias in the product's extra column, and the launch of a
// product whose store a run-time flag picks (ReLU or not, mask or not).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/implicit_gemm.cuh"

namespace cnn::cuda {
// Internal to each file that includes this one, as when the two forms shared one file: the kernels
// instantiated on these types (gemm_finalize_kernel<WeightGradStore>, ...) then stay private to that
// file's module, instead of one kernel name being registered from two.
namespace {

// grad[row, col] (+)= v for col < cols; column `cols` is the bias: grad_bias[row] (+)= v.
// A conv's weight gradient (row f, col (c,i,j)) and a fully connected one (row o, col i) alike.
struct WeightGradStore {
  float* grad_weight;
  float* grad_bias;
  int cols;
  bool accumulate;
  __device__ __forceinline__ void operator()(int row, int col, float v) const {
    float* dst = col < cols ? grad_weight + static_cast<std::int64_t>(row) * cols + col : grad_bias + row;
    *dst = accumulate ? *dst + v : v;
  }
};

// Launches a product with the store picked by a run-time flag.
template <class LoadA, class LoadB, class StoreTrue, class StoreFalse>
void launch_either(bool flag, const GemmPlan& plan, const LoadA& a, const LoadB& b, const StoreTrue& if_true,
                   const StoreFalse& if_false, float* workspace, cudaStream_t stream) {
  if (flag)
    launch_gemm(plan, a, b, if_true, workspace, stream);
  else
    launch_gemm(plan, a, b, if_false, workspace, stream);
}

}  // namespace
}  // namespace cnn::cuda
