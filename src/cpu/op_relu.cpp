// The relu op (src/ops/relu.cpp). Twin of kernels/cuda/op_relu.cu.
#include "cnn/layer_ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {
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
