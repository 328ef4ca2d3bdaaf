// The maxpool op: the forward keeps each window's argmax; the backward routes the gradient to it,
// with the backward of a ReLU before the pool folded in (maxpool_backward_masked, layer_ops.hpp).
#include "cuda/device_op.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {
namespace {

class MaxPoolOp final : public DeviceOp {
 public:
  MaxPoolOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op), layer_(network.layers[op.first_layer]), shared_(shared) {
    out_size_ = layer_.out.size();
  }

  Prepared prepare(std::int64_t n) override { return Prepared{argmax_.reserve(n * out_size_), 0}; }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    maxpool_forward(t.out, argmax_.get(), t.in, batch.n, layer_.pool, shared_.stream);
  }

  // A ReLU before the pool masks through the pool's output (see maxpool_backward_masked).
  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter&) override {
    if (t.grad_in != nullptr)
      maxpool_backward_masked(t.grad_in, t.grad_out, argmax_.get(), t.input_is_relu ? t.out : nullptr, batch.n,
                              layer_.pool, shared_.stream);
  }

 private:
  const Layer& layer_;
  OpShared& shared_;
  DeviceBuffer<std::int32_t> argmax_;  // [n, out_size]
};

}  // namespace

std::unique_ptr<DeviceOp> make_maxpool_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<MaxPoolOp>(op, network, shared);
}

}  // namespace cnn::cuda
