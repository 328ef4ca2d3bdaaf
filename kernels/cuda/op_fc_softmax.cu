// The fc_softmax op: the network's last fc layer (10 outputs, no ReLU) and the softmax cross-entropy
// over its logits. The forward runs one kernel (fc_softmax_cross_entropy, kernels/ops/fc_softmax.cu)
// for the logits, the loss and hit of each sample, dL/dlogits and the fc layer's input gradient, so
// the step's main chain takes one short launch where the fc op and the loss op took three (the fc
// forward, the loss, the fc input gradient); where the op before is a staged convolution (or an fc
// layer run as one), the input gradient goes straight into its staged output gradient (its staging
// pass skipped). The backward queues the weight gradient, the fc op's planned product over
// dL/dlogits, beside the earlier layers' backward (OpShared::weight_grad_place).
// As the loss op (LossLabels): the labels' gather and the batch's loss and hit sums run on the side
// stream in a training step; evaluation adds the chunk's sums on the main stream.
#include <string>

#include "cuda/device_op.hpp"
#include "cuda/loss_labels.hpp"

namespace cnn::cuda {
namespace {

class FcSoftmaxOp final : public ProductOp {
 public:
  FcSoftmaxOp(const Op& op, const Network& network, OpShared& shared)
      : ProductOp(op, network, shared), classes_(network.classes), labels_(shared) {
    out_size_ = 0;             // the loss: no activation after it
    uses_side_stream_ = true;  // the labels' gather and the batch's sums (and the weight gradient)
  }

  Prepared prepare(std::int64_t n) override {
    Prepared prepared = ProductOp::prepare(n);
    prepared.moved |= labels_.reserve(n);
    prepared.moved |= grad_logits_.reserve(n * classes_);
    return prepared;
  }

  // Only the labels' gather: its one product (the weight gradient) stages nothing.
  void start_step(const DeviceBatch& batch) override { labels_.gather_at_step_start(batch); }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    FcSoftmaxTensors head;
    head.in = t.in;
    head.weight = weight();
    head.bias = bias();
    head.labels = labels_.labels_for(batch);
    head.sample_loss = labels_.sample_loss();
    head.sample_correct = labels_.sample_correct();
    if (batch.training) {
      head.grad_logits = grad_logits_.get();
      // Into the op before's staged output gradient where it takes one (a staged conv, or an fc layer
      // run as one: tf32 and bf16), else into gradients[k].
      head.grad_in_staged = t.grad_in_staged;
      head.grad_in = t.grad_in_staged.words != nullptr ? nullptr : t.grad_in;
      head.mask_relu = t.input_is_relu;
    } else {
      head.logits = batch.logits;
    }
    fc_softmax_cross_entropy(head, batch.n, layer_.in.size(), batch.training ? batch.label_smoothing : 0.0f,
                             shared_.stream);
    labels_.add_batch_stats(batch);
  }

  // The forward's kernel can write its input gradient into the op before's staged output gradient.
  bool writes_staged_input_grad() const override { return true; }

  // The input gradient was written by the forward's kernel; the weight gradient is left.
  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter& ready) override {
    const OpShared::Place place = shared_.weight_grad_place(t.grad_in != nullptr);
    fc_backward_weights(plans_for(batch.n).wgrad, grad_weight(), grad_bias(), grad_logits_.get(), t.in, batch.n,
                        layer_.in.size(), classes_, false, place.workspace, place.stream);
    report_ready(ready, place);
  }

  std::string implementation(std::int64_t n) const override {
    return std::string("forward, loss") + (needs_input_grad() ? " and input gradient" : "") +
           " in one kernel, fma.fp32 (a warp per sample); weight gradient " + plan(n).wgrad.describe();
  }

 private:
  // Only the weight gradient is a planned product, and it stages nothing.
  LayerPlans plan(std::int64_t n) const override {
    LayerPlans plans;
    plans.wgrad = plan_fc(layer_.in.size(), classes_, n, shared_.multiprocessors, shared_.precision).wgrad;
    return plans;
  }
  bool staged_products() const override { return false; }

  int classes_;
  LossLabels labels_;
  DeviceBuffer<float> grad_logits_;  // [n, classes], dL/dlogits for the weight gradient
};

}  // namespace

std::unique_ptr<DeviceOp> make_fc_softmax_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<FcSoftmaxOp>(op, network, shared);
}

}  // namespace cnn::cuda
