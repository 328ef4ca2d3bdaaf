// The conv_relu_pool op: conv3x3 (stride 1, no padding, 1 or 3 channels) + ReLU + maxpool2 as the
// seed model's fused kernels (conv_relu_pool.cu, layer_ops.hpp): the forward computes each pool
// cell's four conv outputs from one input patch and keeps only the winner, so the conv output and
// its gradient never exist; the backward is the weight gradient alone (no earlier op has parameters,
// so none needs an input gradient). As the network's first op it reads the uint8 data set through
// the batch's indices (no gathered float batch) and saves each cell's 4x4 input patch for the weight
// gradient; behind another op it reads that op's float output.
#include <map>

#include "cnn/errors.hpp"
#include "ops/cuda_ops.hpp"
#include "cuda/device_op.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {
namespace {

class ConvReluPoolOp final : public DeviceOp {
 public:
  ConvReluPoolOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op), conv_(network.layers[op.first_layer]), shared_(shared) {
    if (needs_input_grad())
      throw Error(ExitCode::kFailure, "internal error: conv_relu_pool computes no input gradient");
    pooled_ = network.layers[op.last_layer].out;
    out_size_ = pooled_.size();
    model_.input = conv_.in;
    model_.kernel = conv_.conv.kernel;
    model_.filters = conv_.conv.filters;
    model_.classes = network.classes;
  }

  // A 3x3 kernel on 1 or 3 channels is too thin a product for tensor cores (k = 9 or 27).
  std::string implementation(std::int64_t /*n*/) const override {
    return "fused direct conv + ReLU + pool, fma.fp32 in every precision";
  }

  Prepared prepare(std::int64_t n) override {
    auto found = plans_.find(n);
    if (found == plans_.end()) found = plans_.emplace(n, plan_conv_relu_pool(model_, n, reads_data())).first;
    bool moved = winners_.reserve(n * out_size_);
    if (reads_data())
      moved |= patches_.reserve(n * model_.input.channels * model_.pooled().height * model_.pooled().width);
    return Prepared{moved, found->second.workspace_floats};
  }

  // Reading the data set, it can write a staged conv's input as well (OpTensors::out_staged).
  bool writes_staged_output(const StagedTensor& into) const override {
    return reads_data() && is_staged_layout_of(into, pooled_);
  }

  // Writes the pool's output (and, from the data set, a staged copy for the conv after it); evaluation
  // saves no patches (no weight gradient follows).
  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    const float* weight = shared_.params + conv_.weight_offset;
    const float* bias = shared_.params + conv_.bias_offset;
    if (reads_data())
      conv_relu_pool_forward_from_data(t.out, winners_.get(), batch.training ? patches_.get() : nullptr, t.out_staged,
                                       batch.images, batch.indices, weight, bias, batch.n, model_, shared_.stream);
    else
      conv_relu_pool_forward(t.out, winners_.get(), t.in, weight, bias, batch.n, model_, shared_.stream);
  }

  // The pool output's gradient, its winners, and the windows from the saved patches (reads_data) or
  // from the input floats.
  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter& ready) override {
    conv_relu_pool_backward_weights(plans_.at(batch.n), shared_.grads + conv_.weight_offset,
                                    shared_.grads + conv_.bias_offset, t.grad_out, t.out, winners_.get(), t.in,
                                    patches_.get(), batch.n, model_, false, shared_.workspace.get(), shared_.stream);
    const GradientReadyPoint range = param_range(conv_);
    ready.ready(range.offset, range.count, false);
  }

  std::vector<GradientReadyPoint> ready_ranges() const override { return {param_range(conv_)}; }

 private:
  const Layer& conv_;
  OpShared& shared_;
  SeedModel model_;  // the conv's shape as the fused kernels take it
  TensorShape pooled_;  // its output: the pool's
  std::map<std::int64_t, ConvReluPoolPlan> plans_;  // by batch size
  DeviceBuffer<std::uint8_t> winners_;  // [n, F, PH, PW]: which of the four conv outputs won (a*2+b)
  DeviceBuffer<uint4> patches_;         // [n, C, PH*PW] 4x4 uint8 input patches (reads_data)
};

}  // namespace

std::unique_ptr<DeviceOp> make_conv_relu_pool_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<ConvReluPoolOp>(op, network, shared);
}

}  // namespace cnn::cuda
