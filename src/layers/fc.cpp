// The fc layer on the host: its token fc:<N>, shape and parameters (the registry entry fc_layer,
// layers.def), the fully connected products, and its CPU op. The feature dimension is long (169*d)
// and the output short (10), so every loop runs along the features, vectorised with OpenMP SIMD
// reductions. Twin of kernels/layers/fc.cu.
#include "cnn/layer_registry.hpp"

#include <algorithm>
#include <string>

#include "cnn/ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {

// ---- the registry entry

namespace {

std::string parse_fc(const std::string& text, std::size_t pos, LayerToken& t) {
  if (!read_int(text, pos, t.fc_out) || pos != text.size()) return "fc:<N> needs a whole number N";
  if (t.fc_out < 1) return "fc needs at least 1 output";
  return "";
}

std::string resolve_fc(const LayerToken& t, Layer& layer) {
  layer.fc_out = t.fc_out;
  if (t.fc_out > kMaxLayerExtent * 16) return "too many outputs";
  layer.out = {t.fc_out, 1, 1};
  return "";
}

std::string canonical_fc(const Layer& layer) { return "fc:" + std::to_string(layer.fc_out); }

LayerParams params_fc(const Layer& layer) {
  const std::int64_t in_features = layer.in.size();
  return {{layer.fc_out, in_features}, layer.fc_out, in_features};
}

double macs_fc(const Layer& layer) { return static_cast<double>(layer.in.size()) * layer.fc_out; }

}  // namespace

const LayerDef fc_layer = {LayerKind::kFc, false, "fc", "fc:<N>", "fc:", parse_fc, LayerInput::kFlat, resolve_fc,
                            canonical_fc, "fc", false, params_fc, macs_fc};

// ---- the math

namespace {
// Features per block in the weight-gradient update: a block of every weight row stays in L1/L2
// while all samples of the batch are added into it.
constexpr std::int64_t kFeatureBlock = 1024;
}  // namespace

void fc_forward(float* out, const float* in, const float* weight, const float* bias, std::int64_t n,
                std::int64_t in_features, std::int64_t out_features) {
  for (std::int64_t s = 0; s < n; ++s) {
    const float* x = in + s * in_features;
    for (std::int64_t o = 0; o < out_features; ++o) {
      const float* w = weight + o * in_features;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (std::int64_t i = 0; i < in_features; ++i) sum += w[i] * x[i];
      out[s * out_features + o] = bias[o] + sum;
    }
  }
}

void fc_backward(float* grad_in, float* grad_weight, float* grad_bias, const float* grad_out, const float* in,
                 const float* weight, std::int64_t n, std::int64_t in_features, std::int64_t out_features) {
  if (grad_in != nullptr) {
    for (std::int64_t s = 0; s < n; ++s) {
      float* gx = grad_in + s * in_features;
      const float* g = grad_out + s * out_features;
      std::fill(gx, gx + in_features, 0.0f);
      for (std::int64_t o = 0; o < out_features; ++o) {
        const float* w = weight + o * in_features;
        const float go = g[o];
#pragma omp simd
        for (std::int64_t i = 0; i < in_features; ++i) gx[i] += go * w[i];
      }
    }
  }
  for (std::int64_t o = 0; o < out_features; ++o) {
    float bias_sum = 0.0f;
    for (std::int64_t s = 0; s < n; ++s) bias_sum += grad_out[s * out_features + o];
    grad_bias[o] += bias_sum;
  }
  for (std::int64_t begin = 0; begin < in_features; begin += kFeatureBlock) {
    const std::int64_t end = std::min(in_features, begin + kFeatureBlock);
    for (std::int64_t o = 0; o < out_features; ++o) {
      float* gw = grad_weight + o * in_features;
      for (std::int64_t s = 0; s < n; ++s) {
        const float go = grad_out[s * out_features + o];
        const float* x = in + s * in_features;
#pragma omp simd
        for (std::int64_t i = begin; i < end; ++i) gw[i] += go * x[i];
      }
    }
  }
}

// ---- the CPU op

namespace {

class FcOp final : public CpuOp {
 public:
  FcOp(const Op& op, const Network& network) : CpuOp(op, network) {}

  void forward(const CpuForward& f) override {
    const Layer& l = layer();
    fc_forward(f.out, f.in, f.params + l.weight_offset, f.params + l.bias_offset, f.mb, in_size(), l.fc_out);
  }

  float* backward(const CpuBackward& t) override {
    const Layer& l = layer();
    fc_backward(t.grad_in, t.grads + l.weight_offset, t.grads + l.bias_offset, t.grad_out, t.in,
                t.params + l.weight_offset, t.mb, in_size(), l.fc_out);
    return t.grad_in;
  }
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_fc_op(const Op& op, const Network& network) {
  return std::make_unique<FcOp>(op, network);
}

}  // namespace cnn
