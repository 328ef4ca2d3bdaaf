// DeviceBackend: see device_backend.hpp.
#include "cuda/device_backend.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "cnn/cuda_backend.hpp"
#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"
#include "ops/cuda_ops.hpp"
#include "ops/layer_ops.hpp"
#include "cuda/launch.hpp"

namespace cnn::cuda {
namespace {

// Evaluation runs over the test set in chunks of this many samples (or the training batch, when
// larger): big enough to fill the GPU, small enough to reuse the training buffers.
constexpr std::int64_t kEvalChunk = 1000;

int pick_device(int local_rank) {
  const int count = cuda_device_count();
  if (count <= 0)
    throw Error(ExitCode::kFailure, "the cuda backend found no usable CUDA device on " + where_am_i() +
                                        " HINT: check CUDA_VISIBLE_DEVICES and nvidia-smi, or use --backend threads");
  return local_rank % count;
}

// Whether any layer, inside blocks too, is of `kind`.
bool has_layer_kind(const std::vector<Layer>& layers, LayerKind kind) {
  for (const Layer& layer : layers)
    if (layer.kind == kind || has_layer_kind(layer.body, kind) || has_layer_kind(layer.shortcut, kind)) return true;
  return false;
}

}  // namespace

DeviceBackend::DeviceBackend(const BackendOptions& options, const Network& network, const std::string& details)
    : total_(network.layout.total()), sample_size_(network.input.size()), classes_(network.classes),
      model_text_(network.describe()), optimizer_(options.optimizer), label_smoothing_(options.label_smoothing),
      augment_(options.augment),
      device_(pick_device(options.local_rank)),
      graphs_option_(options.cuda_graphs),
      graphs_(options.cuda_graphs, "rerun with CNN_CUDA_GRAPHS=0 and report this"),
      overlapped_graphs_(options.cuda_graphs, "rerun with --overlap off and report this") {
  CNN_CHECK_CUDA(cudaSetDevice(device_));
  CNN_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  queue_ = DeviceQueue{device_, stream_, total_};
  statistics_ = std::make_unique<StatisticsExchange>(stream_);
  timer_ = std::make_unique<StepTimer>(stream_);
  nonfinite_check_ = std::make_unique<DeferredNonFiniteCheck>(stream_);
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
  description_ = std::string(props.name) + " (GPU " + std::to_string(device_) + ", PCI " + bus_id + ", " + details;

  params_.resize(total_);
  grads_.resize(total_);
  CNN_CHECK_CUDA(cudaMemsetAsync(params_.get(), 0, params_.bytes(), stream_));
  CNN_CHECK_CUDA(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), stream_));
  optimizer_state_.resize(total_ * optimizer_state_per_param(optimizer_));
  if (optimizer_state_.size() > 0)
    CNN_CHECK_CUDA(cudaMemsetAsync(optimizer_state_.get(), 0, optimizer_state_.bytes(), stream_));
  state_.resize(network.state_count);
  copy_to_device(state_, network.initial_state(), stream_);  // running means 0, variances 1

  draws_masks_ = has_layer_kind(network.layers, LayerKind::kDropout) || augment_.active();
  mask_origin_.resize(1);
  CNN_CHECK_CUDA(cudaMemsetAsync(mask_origin_.get(), 0, mask_origin_.bytes(), stream_));
  loss_sums_.resize(2);
  correct_counts_.resize(2);
  loss_readback_.resize(1);
  correct_readback_.resize(1);
  CNN_CHECK_CUDA(cudaMemsetAsync(loss_sums_.get(), 0, loss_sums_.bytes(), stream_));
  CNN_CHECK_CUDA(cudaMemsetAsync(correct_counts_.get(), 0, correct_counts_.bytes(), stream_));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
}

DeviceBackend::~DeviceBackend() {
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  drop_graphs();
  timer_.reset();
  nonfinite_check_.reset();
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

void DeviceBackend::bind_data(const Dataset& train, const Dataset& test) {
  CNN_CHECK_CUDA(cudaSetDevice(device_));
  if (data_.bind(train, test, sample_size_, model_text_, stream_)) drop_graphs();
}

void DeviceBackend::upload_params(const std::vector<float>& host) {
  if (static_cast<std::int64_t>(host.size()) != total_)
    throw InputError("parameters have " + std::to_string(host.size()) + " floats; the network needs " +
                     std::to_string(total_));
  copy_to_device(params_, host, stream_);
}

std::vector<float> DeviceBackend::download_params() { return copy_to_host(params_, stream_); }

void DeviceBackend::upload_optimizer_state(const std::vector<float>& host) {
  if (static_cast<std::int64_t>(host.size()) != optimizer_state_.size())
    throw InputError("optimizer state has " + std::to_string(host.size()) + " floats; " +
                     optimizer_name(optimizer_) + " needs " + std::to_string(optimizer_state_.size()));
  copy_to_device(optimizer_state_, host, stream_);
}

std::vector<float> DeviceBackend::download_optimizer_state() { return copy_to_host(optimizer_state_, stream_); }

std::string DeviceBackend::device_description() const {
  return description_ + ", CUDA graphs " + (graphs_enabled() ? "on" : graphs_option_ ? "off (bn's statistics)" : "off") +
         ")";
}

namespace {

// Page-locked host memory for the checkpoint's snapshot: the copy out of the device is a DMA at full
// bandwidth, with no staging through a driver buffer as for pageable memory.
class PinnedHostFloats final : public HostFloats {
 public:
  explicit PinnedHostFloats(std::int64_t count) : buffer_(count) { set(buffer_.get(), count); }

 private:
  PinnedBuffer<float> buffer_;
};

}  // namespace

std::unique_ptr<HostFloats> DeviceBackend::allocate_host_floats(std::int64_t count) const {
  CNN_CHECK_CUDA(cudaSetDevice(device_));
  return std::make_unique<PinnedHostFloats>(count);
}

void DeviceBackend::download_all(float* out) {
  // On the stream, after the steps queued before (a plain cudaMemcpy would not wait for this
  // non-blocking stream's work), then one wait for all three copies.
  CNN_CHECK_CUDA(cudaMemcpyAsync(out, params_.get(), params_.bytes(), cudaMemcpyDeviceToHost, stream_));
  if (optimizer_state_.size() > 0)
    CNN_CHECK_CUDA(cudaMemcpyAsync(out + total_, optimizer_state_.get(), optimizer_state_.bytes(),
                                   cudaMemcpyDeviceToHost, stream_));
  if (state_.size() > 0)
    CNN_CHECK_CUDA(cudaMemcpyAsync(out + total_ + optimizer_state_.size(), state_.get(), state_.bytes(),
                                   cudaMemcpyDeviceToHost, stream_));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
}

void DeviceBackend::upload_state(const std::vector<float>& host) {
  if (static_cast<std::int64_t>(host.size()) != state_.size())
    throw InputError("the network's state (bn's running statistics) has " + std::to_string(state_.size()) +
                     " floats; " + std::to_string(host.size()) + " given");
  copy_to_device(state_, host, stream_);  // in place: the bn ops and the captured steps hold its address
}

std::vector<float> DeviceBackend::download_state() { return copy_to_host(state_, stream_); }

void DeviceBackend::set_statistics_communicator(Communicator* ranks) {
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));  // no queued step still holds the old way
  statistics_->set_ranks(ranks);
  drop_graphs();
  graphs_.set_enabled(graphs_enabled());
  overlapped_graphs_.set_enabled(graphs_enabled());
}

std::string DeviceBackend::statistics_exchange() const { return statistics_->description(graphs_enabled()); }

void DeviceBackend::begin_epoch(const std::vector<std::int32_t>& permutation) {
  if (data_.set_order(permutation, stream_)) drop_graphs();  // graphs captured the old address
  eager_overlapped_step_ = true;  // one timed, eager overlapped step per epoch (overlap fraction)
}

void DeviceBackend::check_train_range(std::int64_t first, std::int64_t count) const {
  if (count < 0 || first < 0 || first + count > data_.order_size)
    throw Error(ExitCode::kFailure, "internal error: samples [" + std::to_string(first) + ", " +
                                        std::to_string(first + count) + ") lie outside this epoch's order of " +
                                        std::to_string(data_.order_size) + " (was begin_epoch called?)");
}

void DeviceBackend::ensure_batch_capacity(std::int64_t n) {
  bool moved = batch_indices_.reserve(n);
  moved |= prepare_batch(n);
  capacity_ = std::max(capacity_, n);
  // A captured graph holds raw pointers: any buffer that moved invalidates every graph.
  if (moved) drop_graphs();
}

void DeviceBackend::drop_graphs() noexcept {
  graphs_.clear();
  overlapped_graphs_.clear();
}

// `indices` is this step's slice of the permutation; copying it first (device to device) lets the
// rest of the step read fixed addresses, so a graph can replay it with only this copy's source changed.
void DeviceBackend::enqueue_train_step(std::int64_t n, const std::int32_t* indices, bool timed,
                                       GradientReadyListener* listener) {
  enqueue_index_copy(batch_indices_.get(), indices, n, stream_);
  DeviceBatch batch;
  batch.n = n;
  batch.training = true;
  batch.images = data_.train_images.get();
  batch.labels = data_.train_labels.get();
  batch.indices = batch_indices_.get();
  batch.loss_sum = loss_sums_.get() + kTrainSlot;
  batch.correct = correct_counts_.get() + kTrainSlot;
  batch.label_smoothing = label_smoothing_;
  batch.mask_origin = mask_origin_.get();
  batch.augment = augment_;
  enqueue_step(batch, timed, listener);
}

void DeviceBackend::compute_gradients(std::int64_t first, std::int64_t count) {
  check_train_range(first, count);
  if (count == 0) {  // a rank with an empty slice still takes part in the allreduce, with zeros
    // but not in bn's exchanges, which the other ranks' steps wait for (run_setup refuses such runs)
    if (statistics_->active())
      throw Error(ExitCode::kFailure, "internal error: a rank with an empty slice cannot take part in bn's global "
                                      "statistics HINT: give --bn-local, or a --batch that leaves every rank a sample");
    CNN_CHECK_CUDA(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), stream_));
    return;
  }
  ensure_batch_capacity(count);
  if (draws_masks_) set_mask_origin(mask_origin_.get(), mask_origin(first), stream_);  // before the step (graph)
  graphs_.run(count, batch_indices_.get(), data_.order.get() + first, false, stream_, *timer_,
              [&](const std::int32_t* indices, bool timed) { enqueue_train_step(count, indices, timed, nullptr); });
  train_samples_ += count;
}

void DeviceBackend::compute_gradients_overlapped(std::int64_t first, std::int64_t count,
                                                 GradientReadyListener& listener) {
  if (count == 0 || !listener.stream_ordered()) {
    compute_gradients(first, count);
    listener.all_gradients_ready();
    return;
  }
  check_train_range(first, count);
  ensure_batch_capacity(count);
  if (draws_masks_) set_mask_origin(mask_origin_.get(), mask_origin(first), stream_);
  overlapped_graphs_.set_generation(listener.generation());
  // Eager: the first step of an epoch or of a batch size (timed phase by phase, and its communication
  // by the communicator's events), or every step with graphs off.
  overlapped_graphs_.run(count, batch_indices_.get(), data_.order.get() + first, eager_overlapped_step_, stream_,
                         *timer_, [&](const std::int32_t* indices, bool timed) {
                           enqueue_train_step(count, indices, timed, &listener);
                         });
  eager_overlapped_step_ = false;
  train_samples_ += count;
}

void DeviceBackend::apply_update(const OptimizerSettings& settings, float grad_scale) {
  if (optimizer_state_.size() < total_ * optimizer_state_per_param(settings.kind))
    throw UsageError(std::string(optimizer_name(settings.kind)) +
                     " needs optimizer state, but the cuda backend was made for " + optimizer_name(optimizer_));
  timer_->open();
  apply_optimizer(settings, params_.get(), optimizer_state_.get(), grads_.get(), total_, grad_scale, stream_,
                  nonfinite_check_->skip_flag());
  timer_->close(Phase::kUpdate);
}

BatchStats DeviceBackend::read_stats(int slot) {
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

BatchStats DeviceBackend::take_train_stats() {
  BatchStats stats = read_stats(kTrainSlot);
  stats.count = train_samples_;
  train_samples_ = 0;
  return stats;
}

BatchStats DeviceBackend::evaluate(std::int64_t first, std::int64_t count) {
  return evaluate_logits(first, count, nullptr);
}

BatchStats DeviceBackend::evaluate_logits(std::int64_t first, std::int64_t count, float* logits) {
  if (count < 0 || first < 0 || first + count > data_.test_count)
    throw Error(ExitCode::kFailure, "internal error: test samples [" + std::to_string(first) + ", " +
                                        std::to_string(first + count) + ") lie outside the test set of " +
                                        std::to_string(data_.test_count));
  const std::int64_t chunk = std::max(capacity_, kEvalChunk);
  if (logits != nullptr) eval_logits_.reserve(std::min(chunk, count) * classes_);
  for (std::int64_t done = 0; done < count; done += chunk) {
    DeviceBatch batch;
    batch.n = std::min(chunk, count - done);
    ensure_batch_capacity(batch.n);
    batch.images = data_.test_images.get();
    batch.labels = data_.test_labels.get();
    batch.indices = data_.test_order.get() + first + done;
    batch.loss_sum = loss_sums_.get() + kEvalSlot;
    batch.correct = correct_counts_.get() + kEvalSlot;
    batch.logits = logits != nullptr ? eval_logits_.get() : nullptr;
    enqueue_evaluation(batch);
    // On the stream (a plain cudaMemcpy would not wait for this non-blocking stream's work), then a
    // wait, so that the next chunk may overwrite the buffer.
    if (logits != nullptr) {
      CNN_CHECK_CUDA(cudaMemcpyAsync(logits + done * classes_, eval_logits_.get(),
                                     static_cast<std::size_t>(batch.n * classes_) * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream_));
      CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));
    }
  }
  BatchStats stats = read_stats(kEvalSlot);
  stats.count = count;
  return stats;
}

void DeviceBackend::synchronize() { CNN_CHECK_CUDA(cudaStreamSynchronize(stream_)); }

PhaseTimes DeviceBackend::take_phase_times() { return timer_->take(); }

std::int64_t DeviceBackend::first_nonfinite_grad() { return first_nonfinite(grads_.get(), total_, stream_); }

bool DeviceBackend::enqueue_nonfinite_check() {
  nonfinite_check_->enqueue(grads_.get(), total_, stream_);
  return true;
}

std::int64_t DeviceBackend::enqueued_nonfinite_result() { return nonfinite_check_->result(); }

void DeviceBackend::set_grad_for_test(std::int64_t index, float value) {
  CNN_CHECK_CUDA(cudaMemcpyAsync(grads_.get() + index, &value, sizeof(value), cudaMemcpyHostToDevice, stream_));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream_));  // `value` lives on this frame
}

}  // namespace cnn::cuda
