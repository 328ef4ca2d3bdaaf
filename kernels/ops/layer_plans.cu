// The plans of layer_ops.hpp: the three matrix products (forward, input gradient, weight gradient)
// of a convolution or fully connected layer over a batch of n, each a plan_gemm (gemm_plan.cu), and
// the convolution's choice of input gradient by columns or direct. Plus check_int_range (launch.hpp).
#include <algorithm>
#include <cstdint>
#include <string>

#include "cnn/errors.hpp"
#include "cuda/launch.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {

void check_int_range(std::int64_t value, const char* what) {
  if (value >= (std::int64_t{1} << 31))
    throw UsageError(std::string("the cuda layer kernels index with 32-bit integers; ") + what + " has " +
                     std::to_string(value) + " elements (lower --batch)");
}

std::int64_t LayerPlans::workspace_floats() const {
  return std::max({forward.workspace_floats(), dgrad_by_columns ? column_floats : dgrad.workspace_floats(),
                   wgrad.workspace_floats()});
}

LayerPlans plan_conv(const ConvShape& s, std::int64_t n, int multiprocessors, std::int64_t max_column_floats,
                     Precision precision, bool wgmma) {
  check_int_range(n * s.out_size(), "a convolution's output");
  check_int_range(n * s.in_size(), "a convolution's input");
  const int positions = static_cast<int>(n * s.out_h() * s.out_w());
  const int taps = s.channels * s.kernel * s.kernel;
  LayerPlans p;
  if (precision != Precision::kFp32) {
    // Staged (layer_ops.hpp): k runs over (i,j,channel) with the channels padded to whole chunks; the
    // weight gradient has one more chunk of columns, whose first is the bias.
    const int kk = s.kernel * s.kernel;
    const int cp = staged_channels(s.channels, precision);
    const int fp = staged_channels(s.filters, precision);
    const int chunk = staged_channels(1, precision);
    const int per_word = precision == Precision::kBf16 ? 2 : 1;
    p.staged = true;
    p.forward = plan_staged_forward(positions, s.filters, kk * cp, multiprocessors, precision, wgmma);
    p.dgrad = plan_input_gradient(static_cast<int>(n * s.height * s.width), s.channels, kk * fp, multiprocessors,
                                  precision, wgmma);
    // The TMA form where it applies (stride 1, whole 16-word k tiles a tap) and its boxes fill the GPU
    // without a split of k.
    if (wgmma && s.stride == 1 && fp / per_word % 16 == 0) {
      const GemmPlan boxes =
          plan_pixel_boxes(static_cast<int>(n), s.height, s.width, s.channels, kk * fp, precision);
      if (std::int64_t{boxes.grid().x} * boxes.grid().y >= multiprocessors) p.dgrad = boxes;
    }
    p.wgrad = plan_weight_gradient(s.filters, kk * cp + chunk, positions, multiprocessors, precision);
    p.staged_input_words = n * s.height * s.width * cp / per_word;
    p.staged_grad_words = std::int64_t{positions} * fp / per_word;
    p.staged_weight_words = (std::int64_t{s.filters} * kk * cp + std::int64_t{s.channels} * kk * fp) / per_word;
    return p;
  }
  p.forward = plan_gemm(positions, s.filters, taps, multiprocessors, true, precision);
  const std::int64_t column_floats = std::int64_t{taps} * positions;
  p.dgrad_by_columns = column_floats <= max_column_floats;
  if (p.dgrad_by_columns) {
    // k = F is short and the columns are the output: no split-K, no workspace beyond the columns.
    p.column_floats = column_floats;
    p.dgrad = plan_gemm(positions, taps, s.filters, multiprocessors, false, precision);
  } else {
    p.dgrad = plan_gemm(static_cast<int>(n * s.height * s.width), s.channels, s.filters * s.kernel * s.kernel,
                        multiprocessors, true, precision);
  }
  p.wgrad = plan_gemm(s.filters, taps + 1, positions, multiprocessors, true, precision);
  return p;
}

GemmPlan plan_conv_pooled(const ConvShape& s, std::int64_t n, int multiprocessors, Precision precision, bool wgmma) {
  const PoolShape pool{s.filters, s.out_h(), s.out_w(), 2, 2};
  check_int_range(n * s.out_size(), "a convolution's output");
  const int windows = static_cast<int>(n * pool.out_h() * pool.out_w());
  const int k = s.kernel * s.kernel * staged_channels(s.channels, precision);
  return plan_pool_windows(windows, s.filters, k, multiprocessors, precision, wgmma);
}

LayerPlans plan_fc(std::int64_t in_features, std::int64_t out_features, std::int64_t n, int multiprocessors,
                   Precision precision) {
  check_int_range(n * in_features, "a fully connected layer's input");
  check_int_range(out_features * (in_features + 1), "a fully connected layer's weights");
  const int I = static_cast<int>(in_features), O = static_cast<int>(out_features), N = static_cast<int>(n);
  LayerPlans p;
  p.forward = plan_gemm(N, O, I, multiprocessors, true, precision);
  p.dgrad = plan_gemm(N, I, O, multiprocessors, true, precision);
  p.wgrad = plan_gemm(O, I + 1, N, multiprocessors, true, precision);
  return p;
}

}  // namespace cnn::cuda
