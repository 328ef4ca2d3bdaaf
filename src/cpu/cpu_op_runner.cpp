// CpuOpRunner (cpu_op_runner.hpp): each op kind's forward and backward call, and where the overlapped
// step keeps what its backward reads.
#include "cpu/cpu_op_runner.hpp"

#include <algorithm>
#include <stdexcept>

#include "cnn/layer_ops.hpp"
#include "cnn/ops.hpp"

namespace cnn {

namespace {

std::int64_t bias_count(const Layer& layer) { return layer.kind == LayerKind::kConv ? layer.conv.filters : layer.fc_out; }

// Floats per sample of the largest activation gradient the backward passes between two ops.
std::int64_t largest_gradient(const std::vector<CpuOp>& ops) {
  std::int64_t largest = 0;
  for (const CpuOp& op : ops)
    if (op.needs_input_grad) largest = std::max({largest, op.in_size, op.out_size});
  return largest;
}

}  // namespace

std::vector<CpuOp> plan_cpu_ops(const Network& net, FusionTarget target) {
  std::vector<CpuOp> ops;
  for (const Op& op : plan_ops(net, target)) {
    // The CPU targets fold no ReLU into a store and have no whole-model op.
    if (op.relu_after || op.kind == OpKind::kConvReluPoolFcSoftmax)
      throw std::logic_error("plan_cpu_ops: " + op.name() + " is no CPU op");
    CpuOp cpu;
    cpu.kind = op.kind;
    cpu.needs_input_grad = op.needs_input_grad;
    if (op.kind == OpKind::kSoftmaxCrossEntropy) {
      cpu.in_size = cpu.out_size = net.classes;
    } else {
      const Layer& layer = net.layers[op.first_layer];
      cpu.layer = &layer;
      cpu.in_size = layer.in.size();
      cpu.out_size = net.layers[op.last_layer].out.size();
      if (layer.has_params()) {
        cpu.param_offset = layer.weight_offset;
        cpu.param_count = layer.bias_offset + bias_count(layer) - layer.weight_offset;
      }
      if (op.kind == OpKind::kConvReluPool) {
        cpu.fused_shape.input = layer.in;
        cpu.fused_shape.kernel = layer.conv.kernel;
        cpu.fused_shape.filters = layer.conv.filters;
        cpu.fused_shape.classes = net.classes;
        if (cpu.fused_shape.pooled().size() != cpu.out_size)
          throw std::logic_error("plan_cpu_ops: conv_relu_pool does not match its pool layer");
      }
    }
    ops.push_back(cpu);
  }
  // The overlapped step runs the backward of the last op with parameters right after the forward of
  // each micro-batch, and the ops below it later: what those read must outlive the micro-batch.
  std::size_t first_param = 0, last_param = ops.size() - 1;
  while (!ops[first_param].has_params()) ++first_param;
  while (!ops[last_param].has_params()) --last_param;
  const auto read_later = [&](std::size_t i) { return i >= first_param && i < last_param; };
  for (std::size_t i = 0; i < ops.size(); ++i) {
    CpuOp& op = ops[i];
    const bool masks = op.kind == OpKind::kRelu || op.kind == OpKind::kConvReluPool;
    const bool input_of_params = i + 1 < ops.size() && ops[i + 1].has_params() && read_later(i + 1);
    op.keeps_output = (read_later(i) && masks) || input_of_params;
    op.keeps_argmax = read_later(i) && (op.kind == OpKind::kMaxPool || op.kind == OpKind::kConvReluPool);
  }
  return ops;
}

CpuOpRunner::CpuOpRunner(const std::vector<CpuOp>& ops, const Network& network)
    : ops_(ops),
      classes_(network.classes),
      input_(static_cast<std::size_t>(kCpuMicroBatch * network.input.size())),
      labels_(kCpuMicroBatch),
      outputs_(ops.size()),
      pool_argmax_(ops.size()),
      fused_argmax_(ops.size()),
      input_gradients_(ops.size()),
      grad_a_(static_cast<std::size_t>(kCpuMicroBatch * largest_gradient(ops))),
      grad_b_(grad_a_.size()) {
  size_buffers(1, false);
}

void CpuOpRunner::keep_slots(std::int64_t slots) {
  slots = std::max<std::int64_t>(slots, 1);
  if (slots <= kept_slots_) return;
  kept_slots_ = slots;
  size_buffers(slots, true);
}

void CpuOpRunner::size_buffers(std::int64_t slots, bool input_gradients) {
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    const CpuOp& op = ops_[i];
    auto size = [&](bool kept, std::int64_t per_sample) {
      return static_cast<std::size_t>((kept ? slots : 1) * kCpuMicroBatch * per_sample);
    };
    outputs_[i].resize(size(op.keeps_output, op.out_size));
    if (op.kind == OpKind::kMaxPool) pool_argmax_[i].resize(size(op.keeps_argmax, op.out_size));
    if (op.kind == OpKind::kConvReluPool) fused_argmax_[i].resize(size(op.keeps_argmax, op.out_size));
    if (input_gradients && op.has_params() && op.needs_input_grad) input_gradients_[i].resize(size(true, op.in_size));
  }
}

float* CpuOpRunner::output(std::size_t i, std::int64_t slot) {
  return slot_of(outputs_[i], ops_[i].keeps_output, ops_[i].out_size, slot);
}

float* CpuOpRunner::kept_input_gradient(std::size_t i, std::int64_t slot) {
  return slot_of(input_gradients_[i], true, ops_[i].in_size, slot);
}

void CpuOpRunner::gather(const Dataset& data, const std::int32_t* indices, std::int64_t mb, bool images_only) {
  gather_normalize(input_.data(), data.images.data(), indices, mb, data.shape.size());
  if (!images_only) gather_labels(labels_.data(), data.labels.data(), indices, mb);
}

void CpuOpRunner::forward(const float* params, std::int64_t mb, std::int64_t slot, bool training, BatchStats& stats) {
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    const CpuOp& op = ops_[i];
    const float* in = input_of(i, slot);
    float* out = output(i, slot);
    const Layer* layer = op.layer;
    switch (op.kind) {
      case OpKind::kConv:
        conv2d_forward(out, in, params + layer->weight_offset, params + layer->bias_offset, mb, layer->conv);
        break;
      case OpKind::kRelu:
        relu_forward(out, in, mb * op.out_size);
        break;
      case OpKind::kMaxPool:
        maxpool_forward(out, slot_of(pool_argmax_[i], op.keeps_argmax, op.out_size, slot), in, mb, layer->pool);
        break;
      case OpKind::kFc:
        fc_forward(out, in, params + layer->weight_offset, params + layer->bias_offset, mb, op.in_size, layer->fc_out);
        break;
      case OpKind::kConvReluPool:
        conv_relu_pool_forward(out, slot_of(fused_argmax_[i], op.keeps_argmax, op.out_size, slot), in,
                               params + layer->weight_offset, params + layer->bias_offset, mb, op.fused_shape);
        break;
      case OpKind::kSoftmaxCrossEntropy:
        softmax_cross_entropy(training ? out : nullptr, &stats.loss_sum, &stats.correct, in, labels_.data(), mb,
                              classes_);
        stats.count += mb;
        break;
      case OpKind::kConvReluPoolFcSoftmax:
        break;  // refused by plan_cpu_ops
    }
  }
}

void CpuOpRunner::backward(std::size_t top, std::size_t bottom, std::int64_t mb, std::int64_t slot, float* grad_out,
                           float* bottom_grad_in, const float* params, float* grads) {
  for (std::size_t i = top + 1; i-- > bottom;) {
    const CpuOp& op = ops_[i];
    const Layer* layer = op.layer;
    const float* in = input_of(i, slot);
    // Between ops the gradient moves through the two scratch buffers, never over the one it reads.
    float* grad_in = i == bottom ? bottom_grad_in : (grad_out == grad_a_.data() ? grad_b_.data() : grad_a_.data());
    if (!op.needs_input_grad) grad_in = nullptr;
    switch (op.kind) {
      case OpKind::kConv:
        conv2d_backward(grad_in, grads + layer->weight_offset, grads + layer->bias_offset, grad_out, in,
                        params + layer->weight_offset, mb, layer->conv);
        break;
      case OpKind::kRelu:
        relu_backward(grad_out, grad_out, output(i, slot), mb * op.out_size);  // in place
        grad_in = grad_out;
        break;
      case OpKind::kMaxPool:
        maxpool_backward(grad_in, grad_out, slot_of(pool_argmax_[i], op.keeps_argmax, op.out_size, slot), mb,
                         layer->pool);
        break;
      case OpKind::kFc:
        fc_backward(grad_in, grads + layer->weight_offset, grads + layer->bias_offset, grad_out, in,
                    params + layer->weight_offset, mb, op.in_size, layer->fc_out);
        break;
      case OpKind::kConvReluPool:  // computes no input gradient: the plan puts it before every parameter
        conv_relu_pool_backward(grads + layer->weight_offset, grads + layer->bias_offset, grad_out, output(i, slot),
                                slot_of(fused_argmax_[i], op.keeps_argmax, op.out_size, slot), in, mb,
                                op.fused_shape);
        break;
      case OpKind::kSoftmaxCrossEntropy:  // its gradient was written by the forward
      case OpKind::kConvReluPoolFcSoftmax:
        break;
    }
    grad_out = grad_in;
  }
}

}  // namespace cnn
