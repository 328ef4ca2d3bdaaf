// The softmax_cross_entropy op: the loss over the last fc layer's logits (its input), and their
// gradient (its input gradient). In a training step the labels' gather and the batch's loss and hit
// sums, which the main chain never waits for, run on the side stream; evaluation adds the chunk's
// sums on the main stream.
#include "cuda/cuda_check.hpp"
#include "ops/cuda_ops.hpp"
#include "cuda/device_op.hpp"

namespace cnn::cuda {
namespace {

class SoftmaxCrossEntropyOp final : public DeviceOp {
 public:
  SoftmaxCrossEntropyOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op), classes_(network.classes), shared_(shared) {
    uses_side_stream_ = true;
    CNN_CHECK_CUDA(cudaEventCreateWithFlags(&labels_ready_, cudaEventDisableTiming));
  }
  ~SoftmaxCrossEntropyOp() override {
    if (labels_ready_ != nullptr) (void)cudaEventDestroy(labels_ready_);
  }

  Prepared prepare(std::int64_t n) override {
    bool moved = labels_.reserve(n);
    moved |= sample_loss_.reserve(n);
    moved |= sample_correct_.reserve(n);
    return Prepared{moved, 0};
  }

  // The labels' gather: needed only by this op's forward, at the end of the forward chain.
  void start_step(const DeviceBatch& batch) override {
    shared_.fork();
    gather_labels(labels_.get(), batch.labels, batch.indices, batch.n, shared_.side_stream);
    CNN_CHECK_CUDA(cudaEventRecord(labels_ready_, shared_.side_stream));
  }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    if (!batch.training) {
      gather_labels(labels_.get(), batch.labels, batch.indices, batch.n, shared_.stream);
      softmax_cross_entropy(nullptr, batch.loss_sum, batch.correct, t.in, labels_.get(), batch.n, classes_, 0.0f,
                            shared_.stream);
      if (batch.logits != nullptr) copy_logits(batch.logits, t.in, batch.n, classes_, shared_.stream);
      return;
    }
    CNN_CHECK_CUDA(cudaStreamWaitEvent(shared_.stream, labels_ready_, 0));
    softmax_cross_entropy_per_sample(t.grad_in, sample_loss_.get(), sample_correct_.get(), t.in, labels_.get(),
                                     batch.n, classes_, batch.label_smoothing, shared_.stream);
    shared_.fork();
    add_batch_stats(batch.loss_sum, batch.correct, sample_loss_.get(), sample_correct_.get(), batch.n,
                    shared_.side_stream);
  }

 private:
  int classes_;
  OpShared& shared_;
  cudaEvent_t labels_ready_ = nullptr;  // the side stream's label gather, awaited by the forward
  DeviceBuffer<std::uint8_t> labels_;   // [n], the batch's labels
  DeviceBuffer<float> sample_loss_;     // [n], summed into the batch's loss on the side stream
  DeviceBuffer<int> sample_correct_;    // [n]
};

}  // namespace

std::unique_ptr<DeviceOp> make_softmax_cross_entropy_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<SoftmaxCrossEntropyOp>(op, network, shared);
}

}  // namespace cnn::cuda
