// The relu layer on the host: its registry entry (relu_layer, layers.def), max(0, x) as a plain loop,
// and its CPU op. Twin of kernels/layers/relu.cu.
#include "cnn/layer_registry.hpp"

#include <cstdint>
#include <string>

#include "cnn/layer_ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {

// ---- the registry entry

namespace {

std::string resolve_relu(const LayerToken&, Layer& layer) {
  layer.out = layer.in;
  return "";
}

std::string canonical_relu(const Layer&) { return "relu"; }

}  // namespace

const LayerDef relu_layer = {LayerKind::kRelu, false, "relu", "relu", "relu", nullptr, LayerInput::kAny, resolve_relu,
                              canonical_relu, nullptr, false, nullptr, nullptr};

// ---- the math

void relu_forward(float* out, const float* in, std::int64_t count) {
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void relu_backward(float* grad_in, const float* grad_out, const float* out, std::int64_t count) {
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) grad_in[i] = out[i] > 0.0f ? grad_out[i] : 0.0f;
}

// ---- the CPU op

namespace {

class ReluOp final : public CpuOp {
 public:
  ReluOp(const Op& op, const Network& network) : CpuOp(op, network) { backward_reads_output_ = true; }

  void forward(const CpuForward& f) override { relu_forward(f.out, f.in, f.mb * out_size()); }

  // In place: the mask is taken from the output, so no second gradient buffer is needed.
  float* backward(const CpuBackward& t) override {
    relu_backward(t.grad_out, t.grad_out, t.out, t.mb * out_size());
    return t.grad_out;
  }
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_relu_op(const Op& op, const Network& network) {
  return std::make_unique<ReluOp>(op, network);
}

}  // namespace cnn
