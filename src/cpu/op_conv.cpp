// The conv op: a convolution layer on its own (src/ops/conv.cpp). Twin of kernels/cuda/op_conv.cu.
#include "cnn/layer_ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {
namespace {

class ConvOp final : public CpuOp {
 public:
  ConvOp(const Op& op, const Network& network) : CpuOp(op, network) {}

  void forward(const CpuForward& f) override {
    const Layer& l = layer();
    conv2d_forward(f.out, f.in, f.params + l.weight_offset, f.params + l.bias_offset, f.mb, l.conv);
  }

  float* backward(const CpuBackward& t) override {
    const Layer& l = layer();
    conv2d_backward(t.grad_in, t.grads + l.weight_offset, t.grads + l.bias_offset, t.grad_out, t.in,
                    t.params + l.weight_offset, t.mb, l.conv);
    return t.grad_in;
  }
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_conv_op(const Op& op, const Network& network) {
  return std::make_unique<ConvOp>(op, network);
}

}  // namespace cnn
