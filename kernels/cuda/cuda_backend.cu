// The `cuda` backend; see cuda_backend.hpp.
#include "cuda/cuda_backend.hpp"

#include <algorithm>
#include <optional>

#include "cnn/cuda_backend.hpp"
#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"
#include "ops/cuda_ops.hpp"
#include "cuda/launch.hpp"
#include "ops/seed_shape.hpp"

namespace cnn::cuda {
namespace {

// Refuses what the kernels do not support, before any device work; the description's word on the ops.
std::string checked_ops(const Network& network, const std::vector<Op>& ops, bool augmented) {
  if (network.classes != kSeedClasses)
    throw UsageError("the cuda backend's softmax is built for " + std::to_string(kSeedClasses) + " classes; " +
                     network.describe() + " has " + std::to_string(network.classes) +
                     " (use --backend seq or threads)");
  const auto refuse = [&](const std::string& why) {
    throw UsageError("the cuda backend cannot run " + describe_ops(ops) + " for " + network.describe() + ": " + why);
  };
  // --augment applies in the gather: an op reading the data set itself would train on plain images.
  if (augmented && !ops.empty() && ops.front().reads_data)
    refuse("--augment needs every batch gathered, and " + ops.front().name() + " reads the data set itself");
  if (ops.size() == 1 && ops.front().kind == OpKind::kConvReluPoolFcSoftmax) {
    const std::optional<SeedModel> seed = network.as_seed();
    if (!seed || !cuda_conv_relu_pool_supported(*seed) || !ops.front().reads_data)
      refuse("conv_relu_pool_fc_softmax runs the whole seed model, reading the data set");
    return "ops " + describe_ops(ops);
  }
  const bool fused_head = !ops.empty() && ops.back().kind == OpKind::kFcSoftmax;
  if (!fused_head && (ops.size() < 2 || ops.back().kind != OpKind::kSoftmaxCrossEntropy ||
                      ops[ops.size() - 2].kind != OpKind::kLayer || ops[ops.size() - 2].layer != LayerKind::kFc ||
                      ops[ops.size() - 2].relu_after))
    throw UsageError("the cuda backend needs a network that ends with fc:" + std::to_string(network.classes) +
                     " (got " + network.describe() + ")");
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const Op& op = ops[k];
    if (op.kind == OpKind::kConvReluPoolFcSoftmax) refuse("conv_relu_pool_fc_softmax is the whole model");
    if (op.kind == OpKind::kFcSoftmax &&
        (k + 1 != ops.size() || !cuda_fc_softmax_supported(network.layers[op.first_layer], network.classes)))
      refuse("fc_softmax is the last op, an fc layer of " + std::to_string(network.classes) + " outputs and at most " +
             std::to_string(kCudaFcSoftmaxMaxInputs) + " inputs");
    if (op.reads_data && (k != 0 || op.kind != OpKind::kConvReluPool))
      refuse("only a first conv_relu_pool reads the data set itself");
    if (op.kind != OpKind::kConvReluPool) continue;
    const Layer& conv = network.layers[op.first_layer];
    SeedModel shape;
    shape.input = conv.in;
    shape.kernel = conv.conv.kernel;
    shape.filters = conv.conv.filters;
    shape.classes = network.classes;
    if (!cuda_conv_relu_pool_supported(shape) || op.needs_input_grad)
      refuse("conv_relu_pool takes a 3x3 kernel on 1 or 3 channels, before any layer with parameters");
  }
  return "ops " + describe_ops(ops);
}

}  // namespace

CudaBackend::CudaBackend(const BackendOptions& options, const Network& network, const std::vector<Op>& ops)
    : DeviceBackend(options, network, checked_ops(network, ops, options.augment.active())), network_(network) {
  shared_.stream = stream();
  shared_.params = mutable_params();
  shared_.grads = mutable_grads();
  shared_.state = mutable_state();
  shared_.statistics = statistics();
  shared_.multiprocessors = multiprocessor_count();
  shared_.precision = options.precision;
  if (options.precision != Precision::kFp32) {
    int major = 0;
    CNN_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_queue()->device));
    if (major < 8)
      throw UsageError(std::string("--precision ") + precision_name(options.precision) +
                       " needs tensor cores with tf32 and bf16 (compute capability 8.0 or newer); this GPU has " +
                       std::to_string(major) + ".x (use --precision fp32)");
    shared_.wgmma = wgmma_available();
  }
  for (const Op& op : ops) {
    ops_.push_back(make_device_op(op, network_, shared_));
    op_names_.push_back(op.name());
  }
  // A max-pool that the op before may run in its store is offered to it here, where the sequence is
  // known (a block's inner ops are never offered one: they run their own forwards).
  for (std::size_t k = 0; k + 1 < ops_.size(); ++k)
    if (ops_[k + 1]->can_be_pooled_before()) ops_[k]->offer_pool_after();
  if (std::any_of(ops_.begin(), ops_.end(), [](const auto& op) { return op->uses_side_stream(); }))
    shared_.make_side_stream();
  if (ops.size() == 1 && ops.front().kind == OpKind::kConvReluPoolFcSoftmax) {
    const std::vector<const Layer*> layers = param_layers(network_, ops.front());
    seed_offsets_ = SeedParamOffsets{layers.at(0)->weight_offset, layers.at(0)->bias_offset,
                                     layers.at(1)->weight_offset, layers.at(1)->bias_offset, network_.layout.total()};
    persistent_ = std::make_unique<PersistentSeedSteps>(network_.as_seed().value());
  }
  activations_.resize(ops_.size() + 1);
  gradients_.resize(ops_.size() + 1);
  for (std::size_t k = ops_.size(); k-- > 0;)
    for (const GradientReadyPoint& range : ops_[k]->ready_ranges()) {
      ready_points_.push_back(range);
      after_ready_.push_back(std::make_unique<TimingEventPair>());
    }
}

CudaBackend::~CudaBackend() {
  (void)cudaStreamSynchronize(stream());
  if (shared_.side_stream != nullptr) (void)cudaStreamSynchronize(shared_.side_stream);
}

bool CudaBackend::prepare_batch(std::int64_t n) {
  bool moved = false;
  std::int64_t workspace = 0;
  for (const auto& op : ops_) {
    const DeviceOp::Prepared prepared = op->prepare(n);
    moved |= prepared.moved;
    workspace = std::max(workspace, prepared.workspace_floats);
  }
  moved |= shared_.workspace.reserve(workspace);
  moved |= shared_.side_workspace.reserve(workspace);
  if (!ops_.front()->reads_data()) moved |= activations_[0].reserve(n * network_.input.size());
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    const std::int64_t size = ops_[k]->out_size();
    if (size == 0) continue;
    moved |= activations_[k + 1].reserve(n * size);
    moved |= gradients_[k + 1].reserve(n * size);
  }
  return moved;
}

// Op k writes op k-1's output gradient staged when k-1 offers it and k can (device_op.hpp).
StagedTensor CudaBackend::staged_grad_handover(std::size_t k, std::int64_t n) const {
  if (k == 0 || k >= ops_.size() || !ops_[k]->needs_input_grad() || !ops_[k]->writes_staged_input_grad()) return {};
  return ops_[k - 1]->staged_output_grad(n);
}

// Op k-1 writes op k's input staged when k offers it and k-1 can write that layout (device_op.hpp).
StagedTensor CudaBackend::staged_input_handover(std::size_t k, std::int64_t n) const {
  if (k == 0 || k >= ops_.size()) return {};
  const StagedTensor into = ops_[k]->staged_input(n);
  return ops_[k - 1]->writes_staged_output(into) ? into : StagedTensor{};
}

// Op k leaves its input gradient in split partials for op k-1 when k offers them, and k-1 adds them
// itself while writing its own input gradient staged, with no ReLU mask between (device_op.hpp).
SplitPartials CudaBackend::split_grad_handover(std::size_t k, std::int64_t n) const {
  if (k == 0 || k >= ops_.size() || !ops_[k]->needs_input_grad() || !ops_[k - 1]->reads_split_output_grad() ||
      ops_[k - 1]->output_is_relu() || staged_grad_handover(k - 1, n).words == nullptr)
    return {};
  return ops_[k]->input_grad_partials(n);
}

// Op k runs the max-pool op k+1 in its store when k can and k+1 is one (device_op.hpp).
PooledOutput CudaBackend::pool_handover(std::size_t k, std::int64_t n) const {
  if (k + 1 >= ops_.size() || !ops_[k]->pools_output(n)) return {};
  std::int32_t* argmax = ops_[k + 1]->pool_argmax();
  if (argmax == nullptr) return {};
  return {activations_[k + 2].get(), argmax, staged_input_handover(k + 2, n)};
}

OpTensors CudaBackend::tensors(std::size_t k, std::int64_t n) const {
  OpTensors t;
  t.in = activations_[k].get();
  t.out = activations_[k + 1].get();
  t.grad_in = ops_[k]->needs_input_grad() ? gradients_[k].get() : nullptr;
  t.grad_out = gradients_[k + 1].get();
  t.input_is_relu = k > 0 && ops_[k - 1]->output_is_relu();
  t.grad_in_staged = staged_grad_handover(k, n);
  t.grad_out_staged = staged_grad_handover(k + 1, n).words != nullptr;
  t.out_staged = staged_input_handover(k + 1, n);
  t.in_staged = staged_input_handover(k, n).words != nullptr;
  t.pooled = pool_handover(k, n);
  t.pooled_before = k > 0 && pool_handover(k - 1, n).out != nullptr;
  t.grad_out_partials = split_grad_handover(k + 1, n);
  t.grad_in_partials = split_grad_handover(k, n).sums != nullptr;
  return t;
}

// The batch's images as floats, unless the first op reads the data set itself.
void CudaBackend::enqueue_gather(const DeviceBatch& batch) {
  if (ops_.front()->reads_data()) return;  // never with --augment (checked_ops)
  if (batch.augment.active())
    gather_augment(activations_[0].get(), batch.images, batch.indices, batch.n, network_.input, batch.augment,
                   batch.mask_origin, stream());
  else
    gather_normalize(activations_[0].get(), batch.images, batch.indices, batch.n, network_.input.size(), stream());
}

void CudaBackend::enqueue_forward(const DeviceBatch& batch) {
  for (std::size_t k = 0; k < ops_.size(); ++k) ops_[k]->forward(batch, tensors(k, batch.n));
}

// In stream order, after the index copy. What an op queues on the side stream first (the labels'
// gather) goes ahead of the images' gather, which the forward's first op waits for.
void CudaBackend::enqueue_step(const DeviceBatch& batch, bool timed, GradientReadyListener* listener) {
  for (const auto& op : ops_) op->start_step(batch);
  enqueue_gather(batch);
  if (timed) timer().close(Phase::kData);
  enqueue_forward(batch);
  if (timed) timer().close(Phase::kForward);

  GradientReadyListener* early = listener != nullptr && listener->reduces_early() ? listener : nullptr;
  ReadyReporter ready(early, &shared_, ready_points_.size(), timed ? &after_ready_ : nullptr);
  for (std::size_t k = ops_.size(); k-- > 0;) ops_[k]->backward(batch, tensors(k, batch.n), ready);
  if (shared_.side_stream != nullptr) shared_.join();
  ready.finish();
  if (listener != nullptr) listener->all_gradients_ready();
  if (timed) timer().close(Phase::kBackward);
}

void CudaBackend::enqueue_evaluation(const DeviceBatch& batch) {
  enqueue_gather(batch);
  enqueue_forward(batch);
}

std::vector<GradientReadyPoint> CudaBackend::gradient_ready_points() {
  std::vector<GradientReadyPoint> points = ready_points_;
  for (std::size_t p = 0; p < points.size(); ++p)
    if (after_ready_[p]->measured()) points[p].seconds_after = after_ready_[p]->seconds();
  return points;
}

std::vector<std::string> CudaBackend::implementation_lines(std::int64_t n) const {
  std::vector<std::string> lines;
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    const std::string text = ops_[k]->implementation(n);
    if (!text.empty()) lines.push_back("op " + std::to_string(k) + " " + op_names_[k] + ": " + text);
  }
  return lines;
}

std::string CudaBackend::persistent_steps_unsupported(std::int64_t batch) const {
  // The kernel reads the data set itself: --augment's gather has no place in it.
  if (augment().active()) return "--augment (the persistent kernel reads the data set itself)";
  if (persistent_ == nullptr) return "the persistent kernel runs the seed model only";
  // The kernel writes the fc bias last (the test hook CNN_TEST_NAN_AT poisons the layout's last element there).
  if (seed_offsets_.fc_bias + kSeedClasses != seed_offsets_.total) return "an unexpected parameter layout";
  return persistent_->unsupported(batch);
}

std::string CudaBackend::prepare_chunk_exchange(const MpiWorld& world) {
  // The same answer on every rank (one model), so either every rank or none goes on to the collective.
  if (persistent_ == nullptr) return "the persistent kernel runs the seed model only";
  return persistent_->prepare_exchange(world, device_queue()->device);
}

StepChunkResult CudaBackend::train_chunk(const StepChunk& chunk) {
  if (!persistent_steps_unsupported(chunk.batch).empty()) return Backend::train_chunk(chunk);
  PersistentTargets targets;
  targets.params = mutable_params();
  targets.grads = mutable_grads();
  targets.optimizer_state = mutable_optimizer_state();
  targets.at = seed_offsets_;
  targets.images = data().train_images.get();
  targets.labels = data().train_labels.get();
  targets.order = data().order.get();
  targets.order_size = data().order_size;
  targets.loss_sum = train_loss_sum();
  targets.correct = train_correct();
  targets.label_smoothing = label_smoothing();
  targets.optimizer = optimizer_kind();
  const StepChunkResult result = persistent_->run(chunk, targets, stream());
  count_train_samples(static_cast<std::int64_t>(result.times.size()) * chunk.batch);
  return result;
}

volatile int* CudaBackend::chunk_stop_word() {
  return persistent_ != nullptr ? persistent_->stop_word() : Backend::chunk_stop_word();
}

}  // namespace cnn::cuda

namespace cnn {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options, const Network& network) {
  return make_cuda_backend(options, network, plan_ops(network, FusionTarget::kCuda, options.augment.active()));
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options, const Network& network,
                                           const std::vector<Op>& ops) {
  return std::make_unique<cuda::CudaBackend>(options, network, ops);
}

}  // namespace cnn
