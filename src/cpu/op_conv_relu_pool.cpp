// The fused conv + relu + maxpool2/2 op (src/ops/conv_relu_pool.cpp): pooled values and their
// winners, no conv output. It computes no input gradient, so the plan puts it only where no earlier op
// has parameters. Twin of kernels/cuda/op_conv_relu_pool.cu.
#include <stdexcept>

#include "cnn/ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {
namespace {

class ConvReluPoolOp final : public CpuOp {
 public:
  ConvReluPoolOp(const Op& op, const Network& network) : CpuOp(op, network) {
    backward_reads_output_ = true;  // the pooled values are the ReLU mask
    has_own_data_ = true;
    shape_.input = layer().in;
    shape_.kernel = layer().conv.kernel;
    shape_.filters = layer().conv.filters;
    shape_.classes = network.classes;
    if (shape_.pooled().size() != out_size())
      throw std::logic_error("make_cpu_op: conv_relu_pool does not match its pool layer");
  }

  void size_slots(std::int64_t slots) override { argmax_.resize(static_cast<std::size_t>(slot_values(slots))); }

  void forward(const CpuForward& f) override {
    const Layer& l = layer();
    conv_relu_pool_forward(f.out, argmax(f.slot), f.in, f.params + l.weight_offset, f.params + l.bias_offset, f.mb,
                           shape_);
  }

  float* backward(const CpuBackward& t) override {
    const Layer& l = layer();
    conv_relu_pool_backward(t.grads + l.weight_offset, t.grads + l.bias_offset, t.grad_out, t.out, argmax(t.slot), t.in,
                            t.mb, shape_);
    return t.grad_in;
  }

 private:
  std::uint8_t* argmax(std::int64_t slot) { return own_slot(argmax_, slot); }

  SeedModel shape_;                   // the shape conv_relu_pool_forward/backward take
  std::vector<std::uint8_t> argmax_;  // [slots, mb, out_size]: the winner in each 2x2 window
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_conv_relu_pool_op(const Op& op, const Network& network) {
  return std::make_unique<ConvReluPoolOp>(op, network);
}

}  // namespace cnn
