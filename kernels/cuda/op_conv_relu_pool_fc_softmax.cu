// The conv_relu_pool_fc_softmax op: the whole seed model and its loss as one fused training step
// (seed_step.hpp): the forward reads the uint8 data set through the batch's indices, pools, and adds
// the fc layer's partial logits as it goes; the head takes the softmax cross-entropy; one backward
// sweep computes the fc and conv weight gradients together. With a listener that reduces early
// (ReadyReporter::early), the backward runs fc-first: the fc gradients, 99% of the buffer, in passes
// of their own, so that their allreduce runs under the conv layer's sweep (one more read of the
// pooled activations; the same bits). Evaluation runs the twins (cuda_ops.hpp) on gathered floats.
#include <map>

#include "ops/cuda_ops.hpp"
#include "cuda/device_op.hpp"
#include "ops/seed_step.hpp"

namespace cnn::cuda {
namespace {

class SeedOp final : public DeviceOp {
 public:
  SeedOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op), conv_(*param_layers(network, op).at(0)), fc_(*param_layers(network, op).at(1)),
        model_(network.as_seed().value()), shared_(shared) {
    check_seed_shape(model_);
  }

  std::string implementation(std::int64_t /*n*/) const override {
    return "the seed step, fused, fma.fp32 in every precision";
  }

  Prepared prepare(std::int64_t n) override {
    const SeedStepPlan& plan = plan_for(n);
    const std::int64_t columns = model_.fc_inputs();
    const std::int64_t classes = model_.classes;
    bool moved = false;
    moved |= input_.reserve(n * model_.input.size());
    moved |= labels_.reserve(n);
    moved |= pooled_.reserve(n * columns);
    moved |= argmax_.reserve(n * columns);
    moved |= logits_.reserve(n * classes);
    moved |= grad_logits_.reserve(n * classes);
    moved |= sample_loss_.reserve(n);
    moved |= sample_correct_.reserve(n);
    moved |= fc_partial_.reserve(plan.fc_partial_floats);
    moved |= sweep_partial_.reserve(plan.sweep_partial_floats);
    moved |= patches_.reserve(plan.patch_words);
    return Prepared{moved, 0};
  }

  void forward(const DeviceBatch& batch, const OpTensors&) override {
    if (batch.training) {
      seed_forward_stage(tensors(batch), model_, plan_for(batch.n), shared_.stream);
      return;
    }
    const std::int64_t n = batch.n;
    const float* p = shared_.params;
    gather_normalize(input_.get(), batch.images, batch.indices, n, model_.input.size(), shared_.stream);
    gather_labels(labels_.get(), batch.labels, batch.indices, n, shared_.stream);
    conv_relu_pool_forward(pooled_.get(), argmax_.get(), input_.get(), p + conv_.weight_offset, p + conv_.bias_offset,
                           n, model_, shared_.stream);
    fc_forward(logits_.get(), pooled_.get(), p + fc_.weight_offset, p + fc_.bias_offset, n, model_.fc_inputs(),
               model_.classes, shared_.stream);
    softmax_cross_entropy(nullptr, batch.loss_sum, batch.correct, logits_.get(), labels_.get(), n, model_.classes,
                          0.0f, shared_.stream);
    if (batch.logits != nullptr) copy_logits(batch.logits, logits_.get(), n, model_.classes, shared_.stream);
  }

  void backward(const DeviceBatch& batch, const OpTensors&, ReadyReporter& ready) override {
    const SeedStepPlan& plan = plan_for(batch.n);
    if (!ready.early()) {
      seed_backward_stage(tensors(batch), model_, plan, shared_.stream);
      return;
    }
    const GradientReadyPoint fc = param_range(fc_);
    const GradientReadyPoint conv = param_range(conv_);
    seed_backward_stage(tensors(batch), model_, plan, shared_.stream,
                        [&] { ready.ready(fc.offset, fc.count, false); });
    ready.ready(conv.offset, conv.count, false);
  }

  // The fc layer's gradients (weight, bias: the end of the flat buffer) first, then the conv layer's.
  std::vector<GradientReadyPoint> ready_ranges() const override { return {param_range(fc_), param_range(conv_)}; }

 private:
  const SeedStepPlan& plan_for(std::int64_t n) {
    auto found = plans_.find(n);
    if (found == plans_.end()) found = plans_.emplace(n, plan_seed_step(model_, n)).first;
    return found->second;
  }

  SeedStepTensors tensors(const DeviceBatch& batch) const {
    SeedStepTensors t;
    t.conv_weight = shared_.params + conv_.weight_offset;
    t.conv_bias = shared_.params + conv_.bias_offset;
    t.fc_weight = shared_.params + fc_.weight_offset;
    t.fc_bias = shared_.params + fc_.bias_offset;
    t.grad_conv_weight = shared_.grads + conv_.weight_offset;
    t.grad_conv_bias = shared_.grads + conv_.bias_offset;
    t.grad_fc_weight = shared_.grads + fc_.weight_offset;
    t.grad_fc_bias = shared_.grads + fc_.bias_offset;
    t.images = batch.images;
    t.all_labels = batch.labels;
    t.indices = batch.indices;
    t.pooled = pooled_.get();
    t.argmax = argmax_.get();
    t.fc_partial = fc_partial_.get();
    t.grad_logits = grad_logits_.get();
    t.sample_loss = sample_loss_.get();
    t.sample_correct = sample_correct_.get();
    t.sweep_partial = sweep_partial_.get();
    t.patches = patches_.get();
    t.loss_sum = batch.loss_sum;
    t.correct = batch.correct;
    t.label_smoothing = batch.label_smoothing;
    return t;
  }

  const Layer& conv_;
  const Layer& fc_;
  SeedModel model_;
  OpShared& shared_;
  std::map<std::int64_t, SeedStepPlan> plans_;  // by batch size

  // Per batch, sized for the largest so far. Evaluation gathers floats (input_, labels_) and keeps
  // the logits; a training step reads the data set itself and keeps the rest.
  DeviceBuffer<float> input_, pooled_, logits_, grad_logits_, sample_loss_, fc_partial_, sweep_partial_;
  DeviceBuffer<std::uint8_t> labels_, argmax_;
  DeviceBuffer<int> sample_correct_;
  DeviceBuffer<uint4> patches_;  // the fused forward's saved input patches
};

}  // namespace

std::unique_ptr<DeviceOp> make_conv_relu_pool_fc_softmax_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<SeedOp>(op, network, shared);
}

}  // namespace cnn::cuda
