// The fc op: a fully connected layer (src/ops/fc.cpp). Twin of kernels/cuda/op_fc.cu.
#include "cnn/ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {
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
