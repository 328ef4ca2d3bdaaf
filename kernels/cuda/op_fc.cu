// The fc op (fully connected, its ReLU folded into the store when relu_after): the planned forms of
// layer_ops.hpp, with the launch shape fixed once per batch size (ProductOp, device_op.hpp).
#include "cuda/device_op.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {
namespace {

class FcOp final : public ProductOp {
 public:
  using ProductOp::ProductOp;

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    fc_forward_planned(plans_for(batch.n).forward, t.out, t.in, weight(), bias(), batch.n, layer_.in.size(),
                       layer_.fc_out, relu_, shared_.workspace.get(), shared_.stream);
  }

  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter& ready) override {
    const LayerPlans& plans = plans_for(batch.n);
    const OpShared::Place place = shared_.weight_grad_place(t.grad_in != nullptr);
    fc_backward_weights(plans.wgrad, grad_weight(), grad_bias(), t.grad_out, t.in, batch.n, layer_.in.size(),
                        layer_.fc_out, false, place.workspace, place.stream);
    if (t.grad_in != nullptr)
      fc_backward_data(plans.dgrad, t.grad_in, t.grad_out, weight(), t.input_is_relu ? t.in : nullptr, batch.n,
                       layer_.in.size(), layer_.fc_out, shared_.workspace.get(), shared_.stream);
    report_ready(ready, place);
  }

 private:
  LayerPlans plan(std::int64_t n) const override {
    return plan_fc(layer_.in.size(), layer_.fc_out, n, shared_.multiprocessors);
  }
};

}  // namespace

std::unique_ptr<DeviceOp> make_fc_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<FcOp>(op, network, shared);
}

}  // namespace cnn::cuda
