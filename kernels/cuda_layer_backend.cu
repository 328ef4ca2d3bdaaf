// The layer-by-layer `cuda` backend; see cuda_layer_backend.hpp.
#include "cuda_layer_backend.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "cnn/cuda_backend.hpp"
#include "cnn/errors.hpp"
#include "cuda_check.hpp"
#include "cuda_ops.hpp"
#include "launch.hpp"
#include "seed_shape.hpp"

namespace cnn::cuda {
namespace {

constexpr std::int64_t kEvalChunk = 1000;

int pick_device(int local_rank) {
  const int count = cuda_device_count();
  if (count <= 0)
    throw Error(ExitCode::kFailure, "the cuda backend found no usable CUDA device on " + where_am_i() +
                                        " HINT: check CUDA_VISIBLE_DEVICES and nvidia-smi, or use --backend threads");
  return local_rank % count;
}

}  // namespace

CudaLayerBackend::CudaLayerBackend(const BackendOptions& options, const Network& network)
    : network_(network), optimizer_(options.optimizer), device_(pick_device(options.local_rank)),
      use_graphs_(options.cuda_graphs) {
  if (network_.classes != kSeedClasses)
    throw UsageError("the cuda backend's softmax is built for " + std::to_string(kSeedClasses) + " classes; " +
                     network_.describe() + " has " + std::to_string(network_.classes) +
                     " (use --backend seq or threads)");
  // Lower the layers to ops: flatten is free in NCHW, a ReLU after a conv or fc folds into it.
  bool params_before = false;
  for (const Layer& layer : network_.layers) {
    if (layer.kind == LayerKind::kFlatten) continue;
    if (layer.kind == LayerKind::kRelu && !ops_.empty() && !ops_.back().relu_after &&
        (ops_.back().kind == LayerKind::kConv || ops_.back().kind == LayerKind::kFc)) {
      ops_.back().relu_after = true;
      ops_.back().output_is_relu = true;
      continue;
    }
    Op op;
    op.kind = layer.kind;
    op.layer = &layer;  // network_ is this object's own copy: its layers do not move
    op.output_is_relu = layer.kind == LayerKind::kRelu;
    op.in_size = layer.in.size();
    op.out_size = layer.out.size();
    op.needs_input_grad = params_before;
    params_before |= layer.has_params();
    ops_.push_back(op);
  }
  if (ops_.empty() || ops_.back().kind != LayerKind::kFc || ops_.back().relu_after)
    throw UsageError("the cuda backend needs a network that ends with fc:" + std::to_string(network_.classes) +
                     " (got " + network_.describe() + ")");
  if (enabled_by_environment("CNN_CUDA_FUSE_CONV_POOL")) fuse_first_conv_pool();
  const bool fused = std::any_of(ops_.begin(), ops_.end(), [](const Op& op) { return op.pool_fused; });

  CNN_CHECK_CUDA(cudaSetDevice(device_));
  multiprocessors_ = multiprocessor_count();
  CNN_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // The side stream carries the weight gradients, which nothing on the main stream waits for until
  // the step's end, so the main stream tends to run ahead and take the SMs; at batch 128 and 512 the
  // side stream's chain then finishes last. At the highest priority its blocks are scheduled first
  // whenever both streams have work (nvidia-h100-x1, cifar preset: 121 -> 117 ms/epoch at batch 128,
  // 93 -> 86 at 512; docs/PERFORMANCE.md).
  int least_priority = 0;
  int greatest_priority = 0;
  CNN_CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  CNN_CHECK_CUDA(cudaStreamCreateWithPriority(&side_stream_, cudaStreamNonBlocking, greatest_priority));
  CNN_CHECK_CUDA(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  CNN_CHECK_CUDA(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  CNN_CHECK_CUDA(cudaEventCreateWithFlags(&labels_ready_, cudaEventDisableTiming));
  timer_ = std::make_unique<StepTimer>(stream_);
  make_nonfinite_check();
  cudaMemPool_t pool = nullptr;
  CNN_CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, device_));
  std::uint64_t keep_all = std::numeric_limits<std::uint64_t>::max();
  CNN_CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));

  cudaDeviceProp props{};
  CNN_CHECK_CUDA(cudaGetDeviceProperties(&props, device_));
  char bus_id[32] = "?";
  CNN_CHECK_CUDA(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device_));
  description_ = std::string(props.name) + " (GPU " + std::to_string(device_) + ", PCI " + bus_id +
                 ", layer by layer" + (fused ? ", first conv+relu+pool fused" : "") + ", CUDA graphs " +
                 (use_graphs_ ? "on" : "off") + ")";

  const std::int64_t total = network_.layout.total();
  params_.resize(total);
  grads_.resize(total);
  CNN_CHECK_CUDA(cudaMemsetAsync(params_.get(), 0, params_.bytes(), stream_));
  CNN_CHECK_CUDA(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), stream_));
  optimizer_state_.resize(total * optimizer_state_per_param(optimizer_));
  if (optimizer_state_.size() > 0)
    CNN_CHECK_CUDA(cudaMemsetAsync(optimizer_state_.get(), 0, optimizer_state_.bytes(), stream_));

  activations_.resize(ops_.size() + 1);
  gradients_.resize(ops_.size() + 1);
  argmax_.resize(ops_.size());
  loss_sums_.resize(2);
  correct_counts_.resize(2);
  loss_readback_.resize(1);
  correct_readback_.resize(1);
  CNN_CHECK_CUDA(cudaMemsetAsync(loss_sums_.get(), 0, loss_sums_.bytes(), stream_));
  CNN_CHECK_CUDA(cudaMemsetAsync(correct_counts_.get(), 0, correct_counts_.bytes(), stream_));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
}

// Only the first conv can qualify: the fused op computes no input gradient, and only layers before
// the first one with parameters need none.
void CudaLayerBackend::fuse_first_conv_pool() {
  for (std::size_t k = 0; k + 1 < ops_.size(); ++k) {
    if (ops_[k].kind != LayerKind::kConv) continue;
    Op& conv = ops_[k];
    Op& pool = ops_[k + 1];
    if (conv.needs_input_grad || !conv.relu_after || pool.kind != LayerKind::kMaxPool) return;
    const ConvShape& c = conv.layer->conv;
    const PoolShape& p = pool.layer->pool;
    if (c.kernel != kSeedKernel || c.stride != 1 || c.pad != 0 || p.size != kPoolWindow || p.stride != kPoolWindow)
      return;
    SeedModel m;
    m.input = {c.channels, c.height, c.width};
    m.kernel = c.kernel;
    m.filters = c.filters;
    m.classes = kSeedClasses;
    if (!seed_shape_supported(m)) return;
    conv.pool_fused = true;
    conv.reads_data = k == 0;
    conv.fused_model = m;
    pool.fused_into_conv = true;
    return;
  }
}

CudaLayerBackend::~CudaLayerBackend() {
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  drop_graphs();
  timer_.reset();
  if (side_stream_ != nullptr) (void)cudaStreamSynchronize(side_stream_);
  if (fork_ != nullptr) (void)cudaEventDestroy(fork_);
  if (join_ != nullptr) (void)cudaEventDestroy(join_);
  if (labels_ready_ != nullptr) (void)cudaEventDestroy(labels_ready_);
  if (side_stream_ != nullptr) (void)cudaStreamDestroy(side_stream_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

void CudaLayerBackend::bind_data(const Dataset& train, const Dataset& test) {
  CNN_CHECK_CUDA(cudaSetDevice(device_));
  if (data_.bind(train, test, network_.input.size(), network_.describe(), stream_)) drop_graphs();
}

void CudaLayerBackend::upload_params(const std::vector<float>& host) {
  if (static_cast<std::int64_t>(host.size()) != network_.layout.total())
    throw InputError("parameters have " + std::to_string(host.size()) + " floats; the network needs " +
                     std::to_string(network_.layout.total()));
  copy_to_device(params_, host, stream_);
}

std::vector<float> CudaLayerBackend::download_params() {
  return copy_to_host(params_, stream_);
}

void CudaLayerBackend::upload_optimizer_state(const std::vector<float>& host) {
  if (static_cast<std::int64_t>(host.size()) != optimizer_state_.size())
    throw InputError("optimizer state has " + std::to_string(host.size()) + " floats; " +
                     optimizer_name(optimizer_) + " needs " + std::to_string(optimizer_state_.size()));
  copy_to_device(optimizer_state_, host, stream_);
}

std::vector<float> CudaLayerBackend::download_optimizer_state() {
  return copy_to_host(optimizer_state_, stream_);
}

void CudaLayerBackend::begin_epoch(const std::vector<std::int32_t>& permutation) {
  if (data_.set_order(permutation, stream_)) drop_graphs();  // graphs captured the old address
}

const CudaLayerBackend::Plans& CudaLayerBackend::plans_for(std::int64_t n) {
  auto found = plans_.find(n);
  if (found != plans_.end()) return found->second;
  Plans plans;
  plans.ops.resize(ops_.size());
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    const Layer& layer = *ops_[k].layer;
    if (ops_[k].pool_fused) {
      plans.conv_relu_pool = plan_conv_relu_pool(ops_[k].fused_model, n, ops_[k].reads_data);
      plans.workspace_floats = std::max(plans.workspace_floats, plans.conv_relu_pool.workspace_floats);
    } else if (ops_[k].kind == LayerKind::kConv)
      plans.ops[k] = plan_conv(layer.conv, n, multiprocessors_);
    else if (ops_[k].kind == LayerKind::kFc)
      plans.ops[k] = plan_fc(layer.in.size(), layer.fc_out, n, multiprocessors_);
    plans.workspace_floats = std::max(plans.workspace_floats, plans.ops[k].workspace_floats());
  }
  return plans_.emplace(n, std::move(plans)).first->second;
}

void CudaLayerBackend::ensure_batch_capacity(std::int64_t n) {
  const Plans& plans = plans_for(n);
  bool moved = workspace_.reserve(plans.workspace_floats);
  moved |= side_workspace_.reserve(plans.workspace_floats);
  if (n > capacity_) {
    moved |= batch_indices_.reserve(n);
    moved |= batch_labels_.reserve(n);
    moved |= sample_loss_.reserve(n);
    moved |= sample_correct_.reserve(n);
    if (ops_[0].reads_data) {  // no gathered float batch; the saved input patches instead
      const SeedModel& m = ops_[0].fused_model;
      moved |= pool_patches_.reserve(n * m.input.channels * m.pooled().height * m.pooled().width);
    } else {
      moved |= activations_[0].reserve(n * network_.input.size());
    }
    for (std::size_t k = 0; k < ops_.size(); ++k) {
      if (ops_[k].pool_fused) continue;  // the conv output and its gradient never exist
      moved |= activations_[k + 1].reserve(n * ops_[k].out_size);
      moved |= gradients_[k + 1].reserve(n * ops_[k].out_size);
      if (ops_[k].fused_into_conv)
        moved |= pool_winners_.reserve(n * ops_[k].out_size);
      else if (ops_[k].kind == LayerKind::kMaxPool)
        moved |= argmax_[k].reserve(n * ops_[k].out_size);
    }
    capacity_ = n;
  }
  // A captured graph holds raw pointers: any buffer that moved invalidates every graph.
  if (moved) drop_graphs();
}

void CudaLayerBackend::enqueue_forward(std::int64_t n, const Plans& plans, const std::uint8_t* images,
                                       const std::int32_t* indices, bool training) {
  float* params = params_.get();
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    const Op& op = ops_[k];
    const Layer& layer = *op.layer;
    const float* in = activations_[k].get();
    float* out = activations_[k + 1].get();
    switch (op.kind) {
      case LayerKind::kConv:
        if (op.reads_data) {  // writes the pool's output, activations_[k + 2]
          conv_relu_pool_forward_from_data(activations_[k + 2].get(), pool_winners_.get(),
                                           training ? pool_patches_.get() : nullptr, images, indices,
                                           params + layer.weight_offset, params + layer.bias_offset, n,
                                           op.fused_model, stream_);
          break;
        }
        if (op.pool_fused) {
          conv_relu_pool_forward(activations_[k + 2].get(), pool_winners_.get(), in, params + layer.weight_offset,
                                 params + layer.bias_offset, n, op.fused_model, stream_);
          break;
        }
        conv2d_forward_planned(plans.ops[k].forward, out, in, params + layer.weight_offset, params + layer.bias_offset,
                               n, layer.conv, op.relu_after, workspace_.get(), stream_);
        break;
      case LayerKind::kFc:
        fc_forward_planned(plans.ops[k].forward, out, in, params + layer.weight_offset, params + layer.bias_offset, n,
                           layer.in.size(), layer.fc_out, op.relu_after, workspace_.get(), stream_);
        break;
      case LayerKind::kMaxPool:
        if (!op.fused_into_conv) maxpool_forward(out, argmax_[k].get(), in, n, layer.pool, stream_);
        break;
      case LayerKind::kRelu:
        relu_forward(out, in, n * op.in_size, stream_);
        break;
      case LayerKind::kFlatten:
        break;
    }
  }
}

// The whole step, in stream order. The index copy comes first (a kernel), so a graph replays
// it with only that copy's source changed. What the main stream's chain does not wait for runs on the
// side stream: the labels' gather (needed only by the softmax) and the batch's loss and hit sums.
void CudaLayerBackend::enqueue_train_step(std::int64_t n, const std::int32_t* indices, bool timed) {
  const Plans& plans = plans_for(n);
  auto fork_to_side_stream = [&] {
    CNN_CHECK_CUDA(cudaEventRecord(fork_, stream_));
    CNN_CHECK_CUDA(cudaStreamWaitEvent(side_stream_, fork_, 0));
  };
  enqueue_index_copy(batch_indices_.get(), indices, n, stream_);
  fork_to_side_stream();
  gather_labels(batch_labels_.get(), data_.train_labels.get(), batch_indices_.get(), n, side_stream_);
  CNN_CHECK_CUDA(cudaEventRecord(labels_ready_, side_stream_));
  if (!ops_[0].reads_data)
    gather_normalize(activations_[0].get(), data_.train_images.get(), batch_indices_.get(), n, network_.input.size(),
                     stream_);
  if (timed) timer_->close(Phase::kData);
  enqueue_forward(n, plans, data_.train_images.get(), batch_indices_.get(), true);
  const std::size_t last = ops_.size();
  CNN_CHECK_CUDA(cudaStreamWaitEvent(stream_, labels_ready_, 0));
  softmax_cross_entropy_per_sample(gradients_[last].get(), sample_loss_.get(), sample_correct_.get(),
                                   activations_[last].get(), batch_labels_.get(), n, network_.classes, stream_);
  fork_to_side_stream();
  add_batch_stats(loss_sums_.get() + kTrainSlot, correct_counts_.get() + kTrainSlot, sample_loss_.get(),
                  sample_correct_.get(), n, side_stream_);
  if (timed) timer_->close(Phase::kForward);

  // Backward. gradients_[k+1] is dL/d(op k's output), taken before op k's folded ReLU: whoever
  // writes it masks with that ReLU's output. Weight gradients go to the side stream as soon as
  // their output gradient exists (fork_), the side stream joins the main one at the end (join_).
  // A layer with no input gradient keeps its weight gradient on the main stream: nothing else is
  // left to run there, and on the side stream it would wait for the later layers' weight gradients.
  struct WeightGradPlace {
    cudaStream_t stream;
    float* workspace;
  };
  auto weight_grad_place = [&](bool has_input_grad) {
    if (!has_input_grad) return WeightGradPlace{stream_, workspace_.get()};
    fork_to_side_stream();
    return WeightGradPlace{side_stream_, side_workspace_.get()};
  };
  float* params = params_.get();
  float* grads = grads_.get();
  for (std::size_t k = ops_.size(); k-- > 0;) {
    const Op& op = ops_[k];
    const Layer& layer = *op.layer;
    const float* grad_out = gradients_[k + 1].get();
    const float* in = activations_[k].get();
    float* grad_in = op.needs_input_grad ? gradients_[k].get() : nullptr;
    const float* mask = k > 0 && ops_[k - 1].output_is_relu ? in : nullptr;
    switch (op.kind) {
      case LayerKind::kConv: {
        if (op.pool_fused) {  // the pool's output gradient, gradients_[k + 2], its winners, and the
                              // windows from the saved patches (reads_data) or the input floats
          conv_relu_pool_backward_weights(plans.conv_relu_pool, grads + layer.weight_offset, grads + layer.bias_offset,
                                          gradients_[k + 2].get(), activations_[k + 2].get(), pool_winners_.get(), in,
                                          pool_patches_.get(), n, op.fused_model, false, workspace_.get(), stream_);
          break;
        }
        const WeightGradPlace place = weight_grad_place(grad_in != nullptr);
        conv2d_backward_weights(plans.ops[k].wgrad, grads + layer.weight_offset, grads + layer.bias_offset, grad_out,
                                in, n, layer.conv, false, place.workspace, place.stream);
        if (grad_in != nullptr)
          conv2d_backward_data(plans.ops[k], grad_in, grad_out, params + layer.weight_offset, mask, n,
                               layer.conv, workspace_.get(), stream_);
        break;
      }
      case LayerKind::kFc: {
        const WeightGradPlace place = weight_grad_place(grad_in != nullptr);
        fc_backward_weights(plans.ops[k].wgrad, grads + layer.weight_offset, grads + layer.bias_offset, grad_out, in,
                            n, layer.in.size(), layer.fc_out, false, place.workspace, place.stream);
        if (grad_in != nullptr)
          fc_backward_data(plans.ops[k].dgrad, grad_in, grad_out, params + layer.weight_offset, mask, n,
                           layer.in.size(), layer.fc_out, workspace_.get(), stream_);
        break;
      }
      case LayerKind::kMaxPool:
        // The ReLU before the pool masks through the pool's output (see maxpool_backward_masked).
        // A pool fused into the conv before it has its backward there.
        if (grad_in != nullptr && !op.fused_into_conv)
          maxpool_backward_masked(grad_in, grad_out, argmax_[k].get(), mask != nullptr ? activations_[k + 1].get() : nullptr,
                                  n, layer.pool, stream_);
        break;
      case LayerKind::kRelu:
        // Its own mask (output > 0) equals the one of a ReLU before it, so nothing else to fold.
        if (grad_in != nullptr) relu_backward(grad_in, grad_out, activations_[k + 1].get(), n * op.in_size, stream_);
        break;
      case LayerKind::kFlatten:
        break;
    }
  }
  CNN_CHECK_CUDA(cudaEventRecord(join_, side_stream_));
  CNN_CHECK_CUDA(cudaStreamWaitEvent(stream_, join_, 0));
  if (timed) timer_->close(Phase::kBackward);
}

StepGraph& CudaLayerBackend::graph_for(std::int64_t n) {
  auto found = graphs_.find(n);
  if (found != graphs_.end()) return found->second;
  StepGraph step;
  capture_step_graph(
      step, stream_, [&] { enqueue_train_step(n, data_.order.get(), false); }, batch_indices_.get(),
      "rerun with CNN_CUDA_GRAPHS=0 and report this");
  return graphs_.emplace(n, step).first->second;
}

void CudaLayerBackend::drop_graphs() noexcept {
  for (auto& [n, step] : graphs_) destroy_step_graph(step);
  graphs_.clear();
}

void CudaLayerBackend::compute_gradients(std::int64_t first, std::int64_t count) {
  if (count < 0 || first < 0 || first + count > data_.order_size)
    throw Error(ExitCode::kFailure, "internal error: samples [" + std::to_string(first) + ", " +
                                        std::to_string(first + count) + ") lie outside this epoch's order of " +
                                        std::to_string(data_.order_size) + " (was begin_epoch called?)");
  if (count == 0) {
    CNN_CHECK_CUDA(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), stream_));
    return;
  }
  ensure_batch_capacity(count);
  const std::int32_t* indices = data_.order.get() + first;
  if (use_graphs_ && graphs_.count(count) == 0) {
    timer_->open();
    enqueue_train_step(count, indices, true);
    graph_for(count);
  } else if (use_graphs_) {
    const StepGraph& step = graph_for(count);
    timer_->open();
    launch_step_graph(step, batch_indices_.get(), indices, count, stream_);
    timer_->close_graph_step();
  } else {
    timer_->open();
    enqueue_train_step(count, indices, true);
  }
  train_samples_ += count;
}

void CudaLayerBackend::apply_update(const OptimizerSettings& settings, float grad_scale) {
  const std::int64_t total = network_.layout.total();
  if (optimizer_state_.size() < total * optimizer_state_per_param(settings.kind))
    throw UsageError(std::string(optimizer_name(settings.kind)) + " needs optimizer state, but the cuda backend was made for " +
                     optimizer_name(optimizer_));
  timer_->open();
  apply_optimizer(settings, params_.get(), optimizer_state_.get(), grads_.get(), total, grad_scale, stream_,
                  update_skip_flag());
  timer_->close(Phase::kUpdate);
}

BatchStats CudaLayerBackend::read_stats(int slot) {
  CNN_CHECK_CUDA(cudaMemcpyAsync(loss_readback_.get(), loss_sums_.get() + slot, sizeof(double), cudaMemcpyDeviceToHost,
                                 stream_));
  CNN_CHECK_CUDA(cudaMemcpyAsync(correct_readback_.get(), correct_counts_.get() + slot, sizeof(std::int64_t),
                                 cudaMemcpyDeviceToHost, stream_));
  CNN_CHECK_CUDA(cudaMemsetAsync(loss_sums_.get() + slot, 0, sizeof(double), stream_));
  CNN_CHECK_CUDA(cudaMemsetAsync(correct_counts_.get() + slot, 0, sizeof(std::int64_t), stream_));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
  BatchStats stats;
  stats.loss_sum = *loss_readback_.get();
  stats.correct = *correct_readback_.get();
  return stats;
}

BatchStats CudaLayerBackend::take_train_stats() {
  BatchStats stats = read_stats(kTrainSlot);
  stats.count = train_samples_;
  train_samples_ = 0;
  return stats;
}

BatchStats CudaLayerBackend::evaluate(std::int64_t first, std::int64_t count) {
  if (count < 0 || first < 0 || first + count > data_.test_count)
    throw Error(ExitCode::kFailure, "internal error: test samples [" + std::to_string(first) + ", " +
                                        std::to_string(first + count) + ") lie outside the test set of " +
                                        std::to_string(data_.test_count));
  const std::int64_t chunk = std::max(capacity_, kEvalChunk);
  const std::size_t last = ops_.size();
  for (std::int64_t done = 0; done < count; done += chunk) {
    const std::int64_t n = std::min(chunk, count - done);
    ensure_batch_capacity(n);
    const std::int32_t* indices = data_.test_order.get() + first + done;
    if (!ops_[0].reads_data)
      gather_normalize(activations_[0].get(), data_.test_images.get(), indices, n, network_.input.size(), stream_);
    gather_labels(batch_labels_.get(), data_.test_labels.get(), indices, n, stream_);
    enqueue_forward(n, plans_for(n), data_.test_images.get(), indices, false);
    softmax_cross_entropy(nullptr, loss_sums_.get() + kEvalSlot, correct_counts_.get() + kEvalSlot,
                          activations_[last].get(), batch_labels_.get(), n, network_.classes, stream_);
  }
  BatchStats stats = read_stats(kEvalSlot);
  stats.count = count;
  return stats;
}

void CudaLayerBackend::synchronize() { CNN_CHECK_CUDA(cudaStreamSynchronize(stream_)); }

PhaseTimes CudaLayerBackend::take_phase_times() { return timer_->take(); }

}  // namespace cnn::cuda
