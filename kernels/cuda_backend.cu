// The `cuda` backend; see cuda_backend.hpp.
#include "cuda_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>

#include "cnn/cuda_backend.hpp"
#include "cnn/errors.hpp"
#include "cuda_check.hpp"
#include "cuda_layer_backend.hpp"
#include "cuda_ops.hpp"
#include "launch.hpp"

namespace cnn::cuda {
namespace {

// Evaluation runs the twins over the test set in chunks of this many samples (or the training
// batch, when larger): big enough to fill the GPU, small enough to reuse the training buffers.
constexpr std::int64_t kEvalChunk = 1000;

int pick_device(int local_rank) {
  const int count = cuda_device_count();
  if (count <= 0)
    throw Error(ExitCode::kFailure, "the cuda backend found no usable CUDA device on " + where_am_i() +
                                        " HINT: check CUDA_VISIBLE_DEVICES and nvidia-smi, or use --backend threads");
  return local_rank % count;
}

}  // namespace

CudaBackend::CudaBackend(const BackendOptions& options, const SeedModel& model)
    : model_(model), layout_(model.layout()), optimizer_(options.optimizer), device_(pick_device(options.local_rank)),
      use_graphs_(options.cuda_graphs),
      fused_forward_(enabled_by_environment("CNN_CUDA_FUSED_FORWARD")) {
  check_seed_shape(model_);
  CNN_CHECK_CUDA(cudaSetDevice(device_));
  CNN_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  timer_ = std::make_unique<StepTimer>(stream_);
  make_nonfinite_check();
  // Keep what the twins' stream-ordered scratch allocations return to the pool, instead of handing
  // it back to the driver at every synchronisation.
  cudaMemPool_t pool = nullptr;
  CNN_CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, device_));
  std::uint64_t keep_all = std::numeric_limits<std::uint64_t>::max();
  CNN_CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));

  cudaDeviceProp props{};
  CNN_CHECK_CUDA(cudaGetDeviceProperties(&props, device_));
  char bus_id[32] = "?";
  CNN_CHECK_CUDA(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device_));
  description_ = std::string(props.name) + " (GPU " + std::to_string(device_) + ", PCI " + bus_id + ", CUDA graphs " +
                 (use_graphs_ ? "on" : "off") + (fused_forward_ ? "" : ", unfused forward") + ")";

  const std::int64_t total = layout_.total();
  params_.resize(total);
  grads_.resize(total);
  CNN_CHECK_CUDA(cudaMemsetAsync(params_.get(), 0, params_.bytes(), stream_));
  CNN_CHECK_CUDA(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), stream_));
  optimizer_state_.resize(total * optimizer_state_per_param(optimizer_));
  if (optimizer_state_.size() > 0)
    CNN_CHECK_CUDA(cudaMemsetAsync(optimizer_state_.get(), 0, optimizer_state_.bytes(), stream_));

  const auto view = [&](const char* name) { return layout_.find(name).offset; };
  conv_weight_ = params_.get() + view("conv1.weight");
  conv_bias_ = params_.get() + view("conv1.bias");
  fc_weight_ = params_.get() + view("fc.weight");
  fc_bias_ = params_.get() + view("fc.bias");
  grad_conv_weight_ = grads_.get() + view("conv1.weight");
  grad_conv_bias_ = grads_.get() + view("conv1.bias");
  grad_fc_weight_ = grads_.get() + view("fc.weight");
  grad_fc_bias_ = grads_.get() + view("fc.bias");

  loss_sums_.resize(2);
  correct_counts_.resize(2);
  loss_readback_.resize(1);
  correct_readback_.resize(1);
  CNN_CHECK_CUDA(cudaMemsetAsync(loss_sums_.get(), 0, loss_sums_.bytes(), stream_));
  CNN_CHECK_CUDA(cudaMemsetAsync(correct_counts_.get(), 0, correct_counts_.bytes(), stream_));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  drop_graphs();
  timer_.reset();
  if (stream_ != nullptr) {
    (void)cudaStreamDestroy(stream_);
  }
}

void CudaBackend::bind_data(const Dataset& train, const Dataset& test) {
  CNN_CHECK_CUDA(cudaSetDevice(device_));
  if (data_.bind(train, test, model_.input.size(), model_.describe(), stream_)) drop_graphs();
}

void CudaBackend::upload_params(const std::vector<float>& host) {
  if (static_cast<std::int64_t>(host.size()) != layout_.total())
    throw InputError("parameters have " + std::to_string(host.size()) + " floats; the model needs " +
                     std::to_string(layout_.total()));
  copy_to_device(params_, host, stream_);
}

std::vector<float> CudaBackend::download_params() {
  return copy_to_host(params_, stream_);
}

void CudaBackend::upload_optimizer_state(const std::vector<float>& host) {
  if (static_cast<std::int64_t>(host.size()) != optimizer_state_.size())
    throw InputError("optimizer state has " + std::to_string(host.size()) + " floats; " +
                     optimizer_name(optimizer_) + " needs " + std::to_string(optimizer_state_.size()));
  copy_to_device(optimizer_state_, host, stream_);
}

std::vector<float> CudaBackend::download_optimizer_state() {
  return copy_to_host(optimizer_state_, stream_);
}

void CudaBackend::begin_epoch(const std::vector<std::int32_t>& permutation) {
  if (data_.set_order(permutation, stream_)) drop_graphs();  // graphs captured the old address
  eager_overlapped_step_ = true;  // one timed, eager overlapped step per epoch (overlap fraction)
}

void CudaBackend::ensure_batch_capacity(std::int64_t n) {
  const SeedStepPlan plan = plan_seed_step(model_, n, fused_forward_);
  const std::int64_t columns = model_.fc_inputs();
  const std::int64_t classes = model_.classes;
  bool moved = false;
  moved |= batch_indices_.reserve(n);
  moved |= input_.reserve(n * model_.input.size());
  moved |= batch_labels_.reserve(n);
  moved |= pooled_.reserve(n * columns);
  moved |= argmax_.reserve(n * columns);
  moved |= logits_.reserve(n * classes);
  moved |= grad_logits_.reserve(n * classes);
  moved |= sample_loss_.reserve(n);
  moved |= sample_correct_.reserve(n);
  moved |= fc_partial_.reserve(plan.fc_partial_floats);
  moved |= sweep_partial_.reserve(plan.sweep_partial_floats);
  moved |= patches_.reserve(plan.patch_words);
  capacity_ = std::max(capacity_, n);
  // A captured graph holds raw pointers: any buffer that moved invalidates every graph.
  if (moved) drop_graphs();
}

SeedStepTensors CudaBackend::step_tensors() const {
  SeedStepTensors t;
  t.conv_weight = conv_weight_;
  t.conv_bias = conv_bias_;
  t.fc_weight = fc_weight_;
  t.fc_bias = fc_bias_;
  t.grad_conv_weight = grad_conv_weight_;
  t.grad_conv_bias = grad_conv_bias_;
  t.grad_fc_weight = grad_fc_weight_;
  t.grad_fc_bias = grad_fc_bias_;
  t.images = data_.train_images.get();
  t.all_labels = data_.train_labels.get();
  t.indices = batch_indices_.get();
  t.input = input_.get();
  t.labels = batch_labels_.get();
  t.pooled = pooled_.get();
  t.argmax = argmax_.get();
  t.fc_partial = fc_partial_.get();
  t.grad_logits = grad_logits_.get();
  t.sample_loss = sample_loss_.get();
  t.sample_correct = sample_correct_.get();
  t.sweep_partial = sweep_partial_.get();
  t.patches = patches_.get();
  t.loss_sum = loss_sums_.get() + kTrainSlot;
  t.correct = correct_counts_.get() + kTrainSlot;
  return t;
}

// The whole step, in stream order. `indices` is this step's slice of the permutation; copying it
// first (device to device) lets the rest of the step read fixed addresses, so a graph can replay it
// with only this copy's source changed.
void CudaBackend::enqueue_train_step(const SeedStepPlan& plan, const std::int32_t* indices, bool timed) {
  enqueue_data_and_forward(plan, indices, timed);
  seed_backward_stage(step_tensors(), model_, plan, stream_);
  if (timed) timer_->close(Phase::kBackward);
}

// The part of a step before the backward, shared by the plain and the overlapped step.
void CudaBackend::enqueue_data_and_forward(const SeedStepPlan& plan, const std::int32_t* indices, bool timed) {
  const SeedStepTensors t = step_tensors();
  enqueue_index_copy(batch_indices_.get(), indices, plan.n, stream_);
  seed_data_stage(t, model_, plan, stream_);
  if (timed) timer_->close(Phase::kData);
  seed_forward_stage(t, model_, plan, stream_);
  if (timed) timer_->close(Phase::kForward);
}

StepGraph& CudaBackend::graph_for(std::int64_t n) {
  auto found = graphs_.find(n);
  if (found != graphs_.end()) return found->second;
  const SeedStepPlan plan = plan_seed_step(model_, n, fused_forward_);
  StepGraph step;
  capture_step_graph(
      step, stream_, [&] { enqueue_train_step(plan, data_.order.get(), false); }, batch_indices_.get(),
      "rerun with CNN_CUDA_GRAPHS=0 and report this");
  return graphs_.emplace(n, step).first->second;
}

void CudaBackend::drop_graphs() noexcept {
  for (auto& [n, step] : graphs_) destroy_step_graph(step);
  graphs_.clear();
  drop_overlapped_graphs();
}

void CudaBackend::compute_gradients(std::int64_t first, std::int64_t count) {
  if (count < 0 || first < 0 || first + count > data_.order_size)
    throw Error(ExitCode::kFailure, "internal error: samples [" + std::to_string(first) + ", " +
                                        std::to_string(first + count) + ") lie outside this epoch's order of " +
                                        std::to_string(data_.order_size) + " (was begin_epoch called?)");
  if (count == 0) {  // a rank with an empty slice still takes part in the allreduce, with zeros
    CNN_CHECK_CUDA(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), stream_));
    return;
  }
  ensure_batch_capacity(count);
  const std::int32_t* indices = data_.order.get() + first;
  // The first step of each batch size runs eagerly, phase by phase: it measures the split that graph
  // replays of that size are charged with (step_timer.hpp), and the graph is captured after it.
  if (use_graphs_ && graphs_.count(count) == 0) {
    timer_->open();
    enqueue_train_step(plan_seed_step(model_, count, fused_forward_), indices, true);
    graph_for(count);
  } else if (use_graphs_) {
    const StepGraph& step = graph_for(count);
    timer_->open();
    launch_step_graph(step, batch_indices_.get(), indices, count, stream_);
    timer_->close_graph_step();
  } else {
    timer_->open();
    enqueue_train_step(plan_seed_step(model_, count, fused_forward_), indices, true);
  }
  train_samples_ += count;
}

void CudaBackend::apply_update(const OptimizerSettings& settings, float grad_scale) {
  const std::int64_t total = layout_.total();
  if (optimizer_state_.size() < total * optimizer_state_per_param(settings.kind))
    throw UsageError(std::string(optimizer_name(settings.kind)) +
                     " needs optimizer state, but the cuda backend was made for " + optimizer_name(optimizer_));
  timer_->open();
  apply_optimizer(settings, params_.get(), optimizer_state_.get(), grads_.get(), total, grad_scale, stream_,
                  update_skip_flag());
  timer_->close(Phase::kUpdate);
}

BatchStats CudaBackend::read_stats(int slot) {
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

BatchStats CudaBackend::take_train_stats() {
  BatchStats stats = read_stats(kTrainSlot);
  stats.count = train_samples_;
  train_samples_ = 0;
  return stats;
}

BatchStats CudaBackend::evaluate(std::int64_t first, std::int64_t count) {
  if (count < 0 || first < 0 || first + count > data_.test_count)
    throw Error(ExitCode::kFailure, "internal error: test samples [" + std::to_string(first) + ", " +
                                        std::to_string(first + count) + ") lie outside the test set of " +
                                        std::to_string(data_.test_count));
  const std::int64_t chunk = std::max(capacity_, kEvalChunk);
  ensure_batch_capacity(std::min(chunk, std::max<std::int64_t>(count, 1)));
  const std::int64_t columns = model_.fc_inputs();
  for (std::int64_t done = 0; done < count; done += chunk) {
    const std::int64_t n = std::min(chunk, count - done);
    const std::int32_t* indices = data_.test_order.get() + first + done;
    gather_normalize(input_.get(), data_.test_images.get(), indices, n, model_.input.size(), stream_);
    gather_labels(batch_labels_.get(), data_.test_labels.get(), indices, n, stream_);
    conv_relu_pool_forward(pooled_.get(), argmax_.get(), input_.get(), conv_weight_, conv_bias_, n, model_, stream_);
    fc_forward(logits_.get(), pooled_.get(), fc_weight_, fc_bias_, n, columns, model_.classes, stream_);
    softmax_cross_entropy(nullptr, loss_sums_.get() + kEvalSlot, correct_counts_.get() + kEvalSlot, logits_.get(),
                          batch_labels_.get(), n, model_.classes, stream_);
  }
  BatchStats stats = read_stats(kEvalSlot);
  stats.count = count;
  return stats;
}

void CudaBackend::synchronize() { CNN_CHECK_CUDA(cudaStreamSynchronize(stream_)); }

PhaseTimes CudaBackend::take_phase_times() { return timer_->take(); }

}  // namespace cnn::cuda

namespace cnn {

// The seed model keeps its fused step when the fused kernels support its shape; everything else, or
// the seed model with CNN_CUDA_LAYERS=1 (for A/B and the agreement tests), runs layer by layer.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options, const Network& network) {
  const std::optional<SeedModel> seed = network.as_seed();
  const char* force_layers = std::getenv("CNN_CUDA_LAYERS");
  if (seed && !(force_layers != nullptr && std::strcmp(force_layers, "1") == 0) && cuda::seed_shape_supported(*seed))
    return std::make_unique<cuda::CudaBackend>(options, *seed);
  return std::make_unique<cuda::CudaLayerBackend>(options, network);
}

}  // namespace cnn
