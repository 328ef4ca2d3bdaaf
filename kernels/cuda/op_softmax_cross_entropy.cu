// The softmax_cross_entropy op: the loss over the last fc layer's logits (its input), and their
// gradient (its input gradient). In a training step the labels' gather and the batch's loss and hit
// sums, which the main chain never waits for, run on the side stream; evaluation adds the chunk's
// sums on the main stream.
#include "ops/cuda_ops.hpp"
#include "cuda/device_op.hpp"
#include "cuda/loss_labels.hpp"

namespace cnn::cuda {
namespace {

class SoftmaxCrossEntropyOp final : public DeviceOp {
 public:
  SoftmaxCrossEntropyOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op), classes_(network.classes), shared_(shared), labels_(shared) {
    uses_side_stream_ = true;
  }

  Prepared prepare(std::int64_t n) override { return Prepared{labels_.reserve(n), 0}; }

  void start_step(const DeviceBatch& batch) override { labels_.gather_at_step_start(batch); }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    const std::uint8_t* labels = labels_.labels_for(batch);
    softmax_cross_entropy_per_sample(batch.training ? t.grad_in : nullptr, labels_.sample_loss(),
                                     labels_.sample_correct(), t.in, labels, batch.n, classes_,
                                     batch.training ? batch.label_smoothing : 0.0f, shared_.stream);
    labels_.add_batch_stats(batch);
    if (!batch.training && batch.logits != nullptr) copy_logits(batch.logits, t.in, batch.n, classes_, shared_.stream);
  }

 private:
  int classes_;
  OpShared& shared_;
  LossLabels labels_;
};

}  // namespace

std::unique_ptr<DeviceOp> make_softmax_cross_entropy_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<SoftmaxCrossEntropyOp>(op, network, shared);
}

}  // namespace cnn::cuda
