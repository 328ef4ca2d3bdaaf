// The loss op: softmax cross-entropy over the last fc layer's logits (src/ops/softmax_cross_entropy.cpp).
// Its forward writes the gradient of the logits as its output, where the backward starts; its own
// backward has nothing left to do. Twin of kernels/cuda/op_softmax_cross_entropy.cu.
#include "cnn/ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {
namespace {

class SoftmaxCrossEntropyOp final : public CpuOp {
 public:
  SoftmaxCrossEntropyOp(const Op& op, const Network& network) : CpuOp(op, network), classes_(network.classes) {}

  void forward(const CpuForward& f) override {
    softmax_cross_entropy(f.training ? f.out : nullptr, &f.stats->loss_sum, &f.stats->correct, f.in, f.labels, f.mb,
                          classes_, f.label_smoothing);
    f.stats->count += f.mb;
  }

  float* backward(const CpuBackward& t) override { return t.grad_in; }

 private:
  int classes_;
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_softmax_cross_entropy_op(const Op& op, const Network& network) {
  return std::make_unique<SoftmaxCrossEntropyOp>(op, network);
}

}  // namespace cnn
