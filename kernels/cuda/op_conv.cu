// The conv op (a convolution, its ReLU folded into the store when relu_after): the planned forms of
// layer_ops.hpp, with the launch shape fixed once per batch size.
#include <map>

#include "cuda/device_op.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {
namespace {

class ConvOp final : public DeviceOp {
 public:
  ConvOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op), layer_(network.layers[op.first_layer]), relu_(op.relu_after), shared_(shared) {
    out_size_ = layer_.out.size();
    output_is_relu_ = relu_;
    uses_side_stream_ = needs_input_grad();
  }

  Prepared prepare(std::int64_t n) override {
    auto found = plans_.find(n);
    if (found == plans_.end()) found = plans_.emplace(n, plan_conv(layer_.conv, n, shared_.multiprocessors)).first;
    return Prepared{false, found->second.workspace_floats()};
  }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    conv2d_forward_planned(plans_.at(batch.n).forward, t.out, t.in, shared_.params + layer_.weight_offset,
                           shared_.params + layer_.bias_offset, batch.n, layer_.conv, relu_, shared_.workspace.get(),
                           shared_.stream);
  }

  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter& ready) override {
    const LayerPlans& plans = plans_.at(batch.n);
    const OpShared::Place place = shared_.weight_grad_place(t.grad_in != nullptr);
    conv2d_backward_weights(plans.wgrad, shared_.grads + layer_.weight_offset, shared_.grads + layer_.bias_offset,
                            t.grad_out, t.in, batch.n, layer_.conv, false, place.workspace, place.stream);
    if (t.grad_in != nullptr)
      conv2d_backward_data(plans, t.grad_in, t.grad_out, shared_.params + layer_.weight_offset,
                           t.input_is_relu ? t.in : nullptr, batch.n, layer_.conv, shared_.workspace.get(),
                           shared_.stream);
    const GradientReadyPoint range = param_range(layer_);
    ready.ready(range.offset, range.count, place.stream != shared_.stream);
  }

  std::vector<GradientReadyPoint> ready_ranges() const override { return {param_range(layer_)}; }

 private:
  const Layer& layer_;
  bool relu_;
  OpShared& shared_;
  std::map<std::int64_t, LayerPlans> plans_;  // by batch size
};

}  // namespace

std::unique_ptr<DeviceOp> make_conv_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<ConvOp>(op, network, shared);
}

}  // namespace cnn::cuda
