// CpuOpRunner (cpu_op_runner.hpp): the micro-batch's buffers, the op loop forward and backward, and
// where the overlapped step keeps what its backward reads. What each op calls is its file's
// (src/cpu/op_<name>.cpp).
#include "cpu/cpu_op_runner.hpp"

#include <algorithm>

#include "cnn/ops.hpp"

namespace cnn {

namespace {

// Floats per sample of the largest activation gradient the backward passes between two ops.
std::int64_t largest_gradient(const std::vector<std::unique_ptr<CpuOp>>& ops) {
  std::int64_t largest = 0;
  for (const std::unique_ptr<CpuOp>& op : ops)
    if (op->needs_input_grad()) largest = std::max({largest, op->in_size(), op->out_size()});
  return largest;
}

}  // namespace

CpuOpRunner::CpuOpRunner(const std::vector<Op>& plan, const Network& network, bool sized_micro_batch,
                         float label_smoothing)
    : ops_(make_cpu_ops(plan, network)),
      micro_batch_(sized_micro_batch ? cpu_micro_batch(ops_) : kCpuMicroBatchMax),
      label_smoothing_(label_smoothing),
      input_(static_cast<std::size_t>(micro_batch_ * network.input.size())),
      labels_(static_cast<std::size_t>(micro_batch_)),
      outputs_(ops_.size()),
      input_gradients_(ops_.size()),
      grad_a_(static_cast<std::size_t>(micro_batch_ * largest_gradient(ops_))),
      grad_b_(grad_a_.size()) {
  for (const std::unique_ptr<CpuOp>& op : ops_) op->set_micro_batch(micro_batch_);
  size_buffers(1, false);
}

void CpuOpRunner::grow_micro_batch(std::int64_t samples) {
  if (samples <= micro_batch_) return;
  micro_batch_ = samples;
  for (const std::unique_ptr<CpuOp>& op : ops_) op->set_micro_batch(micro_batch_);
  input_.resize(static_cast<std::size_t>(micro_batch_) * (input_.size() / labels_.size()));
  labels_.resize(static_cast<std::size_t>(micro_batch_));
  grad_a_.resize(static_cast<std::size_t>(micro_batch_ * largest_gradient(ops_)));
  grad_b_.resize(grad_a_.size());
  for (std::vector<float>& kept : input_gradients_) kept.clear();
  size_buffers(std::max<std::int64_t>(kept_slots_, 1), kept_slots_ > 0);
}

void CpuOpRunner::keep_slots(std::int64_t slots) {
  slots = std::max<std::int64_t>(slots, 1);
  if (slots <= kept_slots_) return;
  kept_slots_ = slots;
  size_buffers(slots, true);
}

void CpuOpRunner::size_buffers(std::int64_t slots, bool input_gradients) {
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    CpuOp& op = *ops_[i];
    outputs_[i].resize(static_cast<std::size_t>((op.keeps_output() ? slots : 1) * micro_batch_ * op.out_size()));
    op.size_slots(slots);
    if (input_gradients && op.has_params() && op.needs_input_grad())
      input_gradients_[i].resize(static_cast<std::size_t>(slots * micro_batch_ * op.in_size()));
  }
}

float* CpuOpRunner::kept_input_gradient(std::size_t i, std::int64_t slot) {
  return micro_batch_slot(input_gradients_[i], true, micro_batch_, ops_[i]->in_size(), slot);
}

void CpuOpRunner::gather(const Dataset& data, const std::int32_t* indices, std::int64_t mb, bool images_only,
                         const Augment& augment, const MaskOrigin& origin) {
  if (augment.active())
    gather_augment(input_.data(), data.images.data(), indices, mb, data.shape, augment, origin);
  else
    gather_normalize(input_.data(), data.images.data(), indices, mb, data.shape.size());
  if (!images_only) gather_labels(labels_.data(), data.labels.data(), indices, mb);
}

void CpuOpRunner::forward(const float* params, std::int64_t mb, std::int64_t slot, bool training, BatchStats& stats,
                          const MaskOrigin& origin) {
  for (std::size_t i = 0; i < ops_.size(); ++i)
    ops_[i]->forward({params, input_of(i, slot), output(i, slot), mb, slot, training, labels_.data(), &stats,
                      training ? label_smoothing_ : 0.0f, origin, state_, training ? slice_ : SliceShare{}});
}

void CpuOpRunner::backward(std::size_t top, std::size_t bottom, std::int64_t mb, std::int64_t slot, float* grad_out,
                           float* bottom_grad_in, const float* params, float* grads) {
  for (std::size_t i = top + 1; i-- > bottom;) {
    CpuOp& op = *ops_[i];
    // Between ops the gradient moves through the two scratch buffers, never over the one it reads.
    float* grad_in = i == bottom ? bottom_grad_in : (grad_out == grad_a_.data() ? grad_b_.data() : grad_a_.data());
    if (!op.needs_input_grad()) grad_in = nullptr;
    grad_out = op.backward({params, grads, input_of(i, slot), output(i, slot), grad_out, grad_in, mb, slot, slice_});
  }
}

}  // namespace cnn
