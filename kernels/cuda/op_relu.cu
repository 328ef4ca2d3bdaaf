// The relu op, for a ReLU that no conv or fc before it took in (after a pool, say).
#include "cuda/device_op.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {
namespace {

class ReluOp final : public DeviceOp {
 public:
  ReluOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op), size_(network.layers[op.first_layer].in.size()), shared_(shared) {
    out_size_ = size_;
    output_is_relu_ = true;
  }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    relu_forward(t.out, t.in, batch.n * size_, shared_.stream);
  }

  // Its own mask (output > 0) equals the one of a ReLU before it, so nothing else to fold.
  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter&) override {
    if (t.grad_in != nullptr) relu_backward(t.grad_in, t.grad_out, t.out, batch.n * size_, shared_.stream);
  }

 private:
  std::int64_t size_;  // floats per sample
  OpShared& shared_;
};

}  // namespace

std::unique_ptr<DeviceOp> make_relu_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<ReluOp>(op, network, shared);
}

}  // namespace cnn::cuda
