// The maxpool op (src/ops/maxpool.cpp): it keeps each window's winner for its backward. Twin of
// kernels/cuda/op_maxpool.cu.
#include "cnn/layer_ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {
namespace {

class MaxPoolOp final : public CpuOp {
 public:
  MaxPoolOp(const Op& op, const Network& network) : CpuOp(op, network) { has_own_data_ = true; }

  void size_slots(std::int64_t slots) override { argmax_.resize(static_cast<std::size_t>(slot_values(slots))); }

  void forward(const CpuForward& f) override {
    maxpool_forward(f.out, argmax(f.slot), f.in, f.mb, layer().pool);
  }

  float* backward(const CpuBackward& t) override {
    maxpool_backward(t.grad_in, t.grad_out, argmax(t.slot), t.mb, layer().pool);
    return t.grad_in;
  }

 private:
  std::int32_t* argmax(std::int64_t slot) { return micro_batch_slot(argmax_, keeps_own_data(), out_size(), slot); }

  std::vector<std::int32_t> argmax_;  // [slots, mb, out_size]
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_maxpool_op(const Op& op, const Network& network) {
  return std::make_unique<MaxPoolOp>(op, network);
}

}  // namespace cnn
