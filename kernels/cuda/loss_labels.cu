// LossLabels (loss_labels.hpp).
#include "cuda/loss_labels.hpp"

#include "cuda/cuda_check.hpp"
#include "cuda/device_op.hpp"
#include "ops/cuda_ops.hpp"

namespace cnn::cuda {

LossLabels::LossLabels(OpShared& shared) : shared_(shared) {
  CNN_CHECK_CUDA(cudaEventCreateWithFlags(&labels_ready_, cudaEventDisableTiming));
}

LossLabels::~LossLabels() {
  if (labels_ready_ != nullptr) (void)cudaEventDestroy(labels_ready_);
}

bool LossLabels::reserve(std::int64_t n) {
  bool moved = labels_.reserve(n);
  moved |= sample_loss_.reserve(n);
  moved |= sample_correct_.reserve(n);
  return moved;
}

void LossLabels::gather_at_step_start(const DeviceBatch& batch) {
  shared_.fork();
  gather_labels(labels_.get(), batch.labels, batch.indices, batch.n, shared_.side_stream);
  CNN_CHECK_CUDA(cudaEventRecord(labels_ready_, shared_.side_stream));
}

const std::uint8_t* LossLabels::labels_for(const DeviceBatch& batch) {
  if (batch.training)
    CNN_CHECK_CUDA(cudaStreamWaitEvent(shared_.stream, labels_ready_, 0));
  else
    gather_labels(labels_.get(), batch.labels, batch.indices, batch.n, shared_.stream);
  return labels_.get();
}

void LossLabels::add_batch_stats(const DeviceBatch& batch) {
  cudaStream_t stream = shared_.stream;
  if (batch.training) {
    shared_.fork();
    stream = shared_.side_stream;
  }
  cnn::cuda::add_batch_stats(batch.loss_sum, batch.correct, sample_loss_.get(), sample_correct_.get(), batch.n,
                             stream);
}

}  // namespace cnn::cuda
