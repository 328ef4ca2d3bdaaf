// What every CPU op holds (cpu_op.hpp), the table from op kind (and layer kind, layers.def) to op
// file, and what the overlapped step keeps per slot. The twin of kernels/cuda/device_op.cu.
#include "cpu/cpu_op.hpp"

#include <stdexcept>

namespace cnn {

CpuOp::CpuOp(const Op& op, const Network& network) : needs_input_grad_(op.needs_input_grad) {
  if (op.kind == OpKind::kSoftmaxCrossEntropy) {
    in_size_ = out_size_ = network.classes;
    return;
  }
  layer_ = &network.layers[op.first_layer];
  in_size_ = layer_->in.size();
  out_size_ = network.layers[op.last_layer].out.size();
  if (layer_->has_params()) {
    param_offset_ = layer_->weight_offset;
    param_count_ = layer_->param_count;
  }
}

std::unique_ptr<CpuOp> make_cpu_op(const Op& op, const Network& network) {
  // The CPU targets fold no ReLU into a store.
  if (!op.relu_after) {
    switch (op.kind) {
      case OpKind::kLayer:
        switch (op.layer) {
#define CNN_LAYER(name, Kind) \
  case LayerKind::Kind: return make_cpu_##name##_op(op, network);
#define CNN_VIEW_LAYER(name, Kind) \
  case LayerKind::Kind: break;
#include "cnn/layers.def"
#undef CNN_LAYER
#undef CNN_VIEW_LAYER
        }
        break;
      case OpKind::kSoftmaxCrossEntropy: return make_cpu_softmax_cross_entropy_op(op, network);
      case OpKind::kConvReluPool: return make_cpu_conv_relu_pool_op(op, network);
      case OpKind::kConvReluPoolFcSoftmax: break;  // the whole seed model is a GPU op only
      case OpKind::kFcSoftmax: break;              // a GPU op only
    }
  }
  throw std::logic_error("make_cpu_op: " + op.name() + " is no CPU op");
}

std::int64_t cpu_micro_batch(const std::vector<std::unique_ptr<CpuOp>>& ops) {
  std::int64_t bytes_per_sample = 0;
  for (const std::unique_ptr<CpuOp>& op : ops) bytes_per_sample += 2 * sizeof(float) * op->out_size();
  std::int64_t samples = kCpuMicroBatchMax;
  while (samples > 8 && samples * bytes_per_sample > kCpuMicroBatchBytes) samples /= 2;
  return samples;
}

std::vector<std::unique_ptr<CpuOp>> make_cpu_ops(const std::vector<Op>& plan, const Network& network) {
  std::vector<std::unique_ptr<CpuOp>> ops;
  ops.reserve(plan.size());
  for (const Op& op : plan) ops.push_back(make_cpu_op(op, network));
  // The overlapped step runs the backward of the last op with parameters right after the forward of
  // each micro-batch, and the ops below it later: what those read must outlive the micro-batch.
  std::size_t first_param = 0, last_param = ops.size() - 1;
  while (!ops[first_param]->has_params()) ++first_param;
  while (!ops[last_param]->has_params()) --last_param;
  const auto read_later = [&](std::size_t i) { return i >= first_param && i < last_param; };
  for (std::size_t i = 0; i < ops.size(); ++i) {
    CpuOp& op = *ops[i];
    const bool input_of_params = i + 1 < ops.size() && ops[i + 1]->has_params() && read_later(i + 1);
    op.set_kept((read_later(i) && op.backward_reads_output()) || input_of_params, read_later(i));
  }
  return ops;
}

}  // namespace cnn
