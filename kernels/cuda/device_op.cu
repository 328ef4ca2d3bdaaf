// What the ops share (device_op.hpp), and the table from op kind (and layer kind, layers.def) to op file.
#include "cuda/device_op.hpp"

#include <utility>

#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"

namespace cnn::cuda {

OpShared::~OpShared() {
  if (fork_event != nullptr) (void)cudaEventDestroy(fork_event);
  if (join_event != nullptr) (void)cudaEventDestroy(join_event);
  if (side_stream != nullptr) (void)cudaStreamDestroy(side_stream);
}

void OpShared::make_side_stream() {
  int least_priority = 0;
  int greatest_priority = 0;
  CNN_CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  CNN_CHECK_CUDA(cudaStreamCreateWithPriority(&side_stream, cudaStreamNonBlocking, greatest_priority));
  CNN_CHECK_CUDA(cudaEventCreateWithFlags(&fork_event, cudaEventDisableTiming));
  CNN_CHECK_CUDA(cudaEventCreateWithFlags(&join_event, cudaEventDisableTiming));
}

void OpShared::fork() const {
  CNN_CHECK_CUDA(cudaEventRecord(fork_event, stream));
  CNN_CHECK_CUDA(cudaStreamWaitEvent(side_stream, fork_event, 0));
}

void OpShared::join() const {
  CNN_CHECK_CUDA(cudaEventRecord(join_event, side_stream));
  CNN_CHECK_CUDA(cudaStreamWaitEvent(stream, join_event, 0));
}

OpShared::Place OpShared::weight_grad_place(bool has_input_grad) {
  if (!has_input_grad) return Place{stream, workspace.get()};
  fork();
  return Place{side_stream, side_workspace.get()};
}

ReadyReporter::ReadyReporter(GradientReadyListener* listener, const OpShared* shared, std::size_t points,
                             std::vector<std::unique_ptr<TimingEventPair>>* timers)
    : listener_(listener), shared_(shared), points_(points), timers_(timers) {}

void ReadyReporter::ready(std::int64_t offset, std::int64_t count, bool on_side_stream) {
  if (listener_ == nullptr) return;
  const std::size_t point = next_++;
  if (point + 1 >= points_) return;  // the last range: all_gradients_ready() follows
  if (on_side_stream) shared_->join();
  listener_->gradients_ready(offset, count);
  if (timers_ != nullptr) (*timers_)[point]->start(shared_->stream);
}

void ReadyReporter::finish() {
  if (listener_ == nullptr || timers_ == nullptr) return;
  for (std::size_t point = 0; point < next_ && point + 1 < points_; ++point) (*timers_)[point]->end(shared_->stream);
}

GradientReadyPoint param_range(const Layer& layer) {
  return GradientReadyPoint{layer.weight_offset, layer.param_count, 0.0};
}

ProductOp::ProductOp(const Op& op, const Network& network, OpShared& shared)
    : DeviceOp(op), layer_(network.layers[op.first_layer]), relu_(op.relu_after), shared_(shared) {
  out_size_ = layer_.out.size();
  output_is_relu_ = relu_;
  uses_side_stream_ = needs_input_grad();
  if (shared.precision != Precision::kFp32) {
    uses_side_stream_ = true;  // start_step's staging of the weights
    CNN_CHECK_CUDA(cudaEventCreateWithFlags(&weights_staged_, cudaEventDisableTiming));
  }
}

ProductOp::~ProductOp() {
  if (weights_staged_ != nullptr) (void)cudaEventDestroy(weights_staged_);
}

DeviceOp::Prepared ProductOp::prepare(std::int64_t n) {
  auto found = plans_.find(n);
  if (found == plans_.end()) found = plans_.emplace(n, plan(n)).first;
  const LayerPlans& plans = found->second;
  Prepared prepared{false, plans.workspace_floats()};
  if (plans.staged) {
    prepared.moved |= staged_input_.reserve(plans.staged_input_words);
    prepared.moved |= staged_grad_.reserve(plans.staged_grad_words);
    prepared.moved |= staged_weight_.reserve(plans.staged_weight_words);
  }
  return prepared;
}

void ProductOp::start_step(const DeviceBatch& batch) {
  const LayerPlans& plans = plans_for(batch.n);
  if (!plans.staged) return;
  shared_.fork();
  conv2d_stage_weights(plans, weight(), staged_conv(), staged(), shared_.side_stream);
  CNN_CHECK_CUDA(cudaEventRecord(weights_staged_, shared_.side_stream));
  weights_pending_ = true;
}

bool ProductOp::weights_staged_at_start() {
  if (!std::exchange(weights_pending_, false)) return false;
  CNN_CHECK_CUDA(cudaStreamWaitEvent(shared_.stream, weights_staged_, 0));
  return true;
}

StagedTensor ProductOp::staged_output_grad(std::int64_t n) const {
  const LayerPlans& plans = plans_for(n);
  if (!plans.staged) return {};
  const ConvShape conv = staged_conv();
  return {staged().output_grad, plans.wgrad.precision, staged_channels(conv.filters, plans.wgrad.precision),
          conv.out_h() * conv.out_w()};
}

bool is_staged_layout_of(const StagedTensor& into, const TensorShape& shape) {
  return into.pixels == shape.height * shape.width && holds_staged_samples(into, shape.size());
}

bool ProductOp::writes_staged_output(const StagedTensor& into) const {
  return staged_products() && holds_staged_samples(into, out_size_);
}

StagedTensor ProductOp::staged_input(std::int64_t n) const {
  const LayerPlans& plans = plans_for(n);
  if (!plans.staged) return {};
  const ConvShape conv = staged_conv();
  return {staged().input, plans.forward.precision, staged_channels(conv.channels, plans.forward.precision),
          conv.height * conv.width};
}

ConvShape ProductOp::staged_conv() const {
  throw Error(ExitCode::kFailure, "internal error: a staged plan for layer " + layer_.name + ", which has none");
}

std::string ProductOp::implementation(std::int64_t n) const {
  const LayerPlans plans = plan(n);
  std::string text = std::string(plans.staged ? "staged NHWC, " : "") + "forward " + forward_description(plans);
  if (needs_input_grad())
    text += "; input gradient " + plans.dgrad.describe() + (plans.dgrad_by_columns ? " + col2im (fp32)" : "");
  return text + "; weight gradient " + plans.wgrad.describe();
}

void ProductOp::report_ready(ReadyReporter& ready, const OpShared::Place& weight_grad_place) const {
  const GradientReadyPoint range = param_range(layer_);
  ready.ready(range.offset, range.count, weight_grad_place.stream != shared_.stream);
}

std::unique_ptr<DeviceOp> make_device_op(const Op& op, const Network& network, OpShared& shared) {
  switch (op.kind) {
    case OpKind::kLayer:
      switch (op.layer) {
#define CNN_LAYER(name, Kind) \
  case LayerKind::Kind: return make_##name##_op(op, network, shared);
#define CNN_VIEW_LAYER(name, Kind) \
  case LayerKind::Kind: break;
#include "cnn/layers.def"
#undef CNN_LAYER
#undef CNN_VIEW_LAYER
      }
      break;
    case OpKind::kSoftmaxCrossEntropy: return make_softmax_cross_entropy_op(op, network, shared);
    case OpKind::kConvReluPool: return make_conv_relu_pool_op(op, network, shared);
    case OpKind::kConvReluPoolFcSoftmax: return make_conv_relu_pool_fc_softmax_op(op, network, shared);
    case OpKind::kFcSoftmax: return make_fc_softmax_op(op, network, shared);
  }
  throw Error(ExitCode::kFailure, "internal error: the cuda backend has no op " + op.name());
}

}  // namespace cnn::cuda
