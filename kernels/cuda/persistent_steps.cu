// PersistentSeedSteps: see persistent_steps.hpp.
#include "cuda/persistent_steps.hpp"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/launch.hpp"
#include "dist/device_communicators.hpp"
#include "ops/nonfinite.cuh"
#include "ops/seed_shape.hpp"

namespace cnn::cuda {

PersistentSeedSteps::PersistentSeedSteps(const SeedModel& model) : model_(model) {
  verdict_.resize(1);
  stop_request_.resize(1);
  outcome_.resize(1);
  outcome_readback_.resize(1);
  // The kernel expects these words as it leaves them: no non-finite value seen, no stop requested.
  CNN_CHECK_CUDA(cudaMemset(verdict_.get(), 0xff, verdict_.bytes()));
  CNN_CHECK_CUDA(cudaMemset(stop_request_.get(), 0, stop_request_.bytes()));
  void* words = nullptr;
  CNN_CHECK_CUDA(cudaHostAlloc(&words, 2 * sizeof(int), cudaHostAllocMapped));
  stop_word_ = static_cast<volatile int*>(words);
  progress_word_ = stop_word_ + 1;
  *stop_word_ = 0;
  *progress_word_ = 0;
  void* on_device = nullptr;
  CNN_CHECK_CUDA(cudaHostGetDevicePointer(&on_device, words, 0));
  stop_word_device_ = static_cast<const volatile int*>(on_device);
  progress_word_device_ = static_cast<volatile int*>(on_device) + 1;
  CNN_CHECK_CUDA(cudaEventCreateWithFlags(&chunk_done_, cudaEventDisableTiming));
}

PersistentSeedSteps::~PersistentSeedSteps() {
  if (chunk_done_ != nullptr) (void)cudaEventDestroy(chunk_done_);
  if (stop_word_ != nullptr) (void)cudaFreeHost(const_cast<int*>(stop_word_));
}

std::string PersistentSeedSteps::unsupported(std::int64_t batch) const {
  return seed_persistent_unsupported(model_, batch);
}

std::string PersistentSeedSteps::prepare_exchange(const MpiWorld& world, int device) {
  std::string why = peer_allreduce_unavailable(world, device);  // collective
  // Block b of every rank owns the same columns: the grids must match.
  const int blocks = multiprocessor_count();
  const bool same_grid = world.allreduce_min(blocks) == world.allreduce_max(blocks);
  if (why.empty() && !same_grid) why = "the GPUs have different multiprocessor counts";
  if (why.empty() && blocks > kPeerMaxBlocks) why = "more than " + std::to_string(kPeerMaxBlocks) + " multiprocessors";
  if (!why.empty()) return "no exchange inside the persistent kernel: " + why;
  peers_ = std::make_unique<PeerArea>(world, device, plan_seed_persistent(model_, 1).exchange_floats);
  return "";
}

const SeedPersistentPlan& PersistentSeedSteps::plan_for(std::int64_t n) {
  auto found = plans_.find(n);
  if (found == plans_.end()) found = plans_.emplace(n, plan_seed_persistent(model_, n)).first;
  return found->second;
}

namespace {

StepRule rule_for(const OptimizerSettings& settings, float grad_scale) {
  StepRule rule;
  rule.kind = settings.kind;
  rule.lr = settings.lr;
  rule.momentum = settings.momentum;
  rule.weight_decay = settings.weight_decay;
  rule.nesterov = settings.nesterov;
  if (settings.kind == OptimizerKind::kAdam || settings.kind == OptimizerKind::kAdamW) rule.adam = adam_step(settings);
  rule.grad_scale = grad_scale;
  return rule;
}

double seconds_between(unsigned long long from, unsigned long long to) {
  return to > from ? static_cast<double>(to - from) * 1e-9 : 0.0;
}

}  // namespace

// Waits for the launch while the watchdog is told of every step the kernel finishes: a chunk may be a
// whole epoch, and a kernel that stops moving (a peer rank lost in the exchange) must be seen within
// one step's --stall-timeout, as the one-step loop is. Polls as cudaStreamSynchronize spins.
void PersistentSeedSteps::wait_reporting_progress(const StepChunk& chunk, cudaStream_t stream) {
  CNN_CHECK_CUDA(cudaEventRecord(chunk_done_, stream));
  int reported = 0;
  for (;;) {
    const cudaError_t state = cudaEventQuery(chunk_done_);
    if (state != cudaSuccess && state != cudaErrorNotReady) CNN_CHECK_CUDA(state);
    const int done = *progress_word_;  // after the query: final once the event is
    if (done > reported && chunk.on_progress) chunk.on_progress(done);
    reported = std::max(reported, done);
    if (state == cudaSuccess) return;
    std::this_thread::yield();
  }
}

StepChunkResult PersistentSeedSteps::run(const StepChunk& chunk, const PersistentTargets& targets,
                                         cudaStream_t stream) {
  const std::int64_t steps = chunk.steps();
  const std::int64_t n = chunk.batch;
  if (chunk.stride != n && peers_ == nullptr)
    throw std::logic_error("a chunk of slices of a larger global batch without the in-kernel exchange (prepare_exchange)");
  const std::int64_t end = chunk.first + (steps - 1) * chunk.stride + n;  // after the last step's last sample
  if (steps < 1 || n < 1 || chunk.first < 0 || chunk.stride < n || end > targets.order_size)
    throw Error(ExitCode::kFailure, "internal error: a chunk of " + std::to_string(steps) + " steps of " +
                                        std::to_string(n) + " samples from " + std::to_string(chunk.first) +
                                        " lies outside this epoch's order of " + std::to_string(targets.order_size));
  if (const std::string why = unsupported(n); !why.empty())
    throw std::logic_error("the persistent kernel was asked for steps it cannot run: " + why);
  const OptimizerKind kind = chunk.optimizer.front().kind;
  if (optimizer_state_per_param(kind) > optimizer_state_per_param(targets.optimizer))
    throw UsageError(std::string(optimizer_name(kind)) + " needs optimizer state, but the cuda backend was made for " +
                     optimizer_name(targets.optimizer));
  const SeedPersistentPlan& plan = plan_for(n);

  // Scratch for the largest plan so far, and this chunk's rules and clocks.
  block_logits_.reserve(plan.block_logit_floats);
  grad_logits_.reserve(n * kSeedClasses);
  sample_loss_.reserve(n);
  sample_correct_.reserve(n);
  conv_partial_.reserve(plan.conv_partial_floats);
  rules_.reserve(steps);
  rules_staging_.resize(std::max(rules_staging_.size(), steps));
  clocks_.reserve(4 * steps);
  clocks_readback_.resize(std::max(clocks_readback_.size(), 4 * steps));
  for (std::int64_t k = 0; k < steps; ++k) {
    const OptimizerSettings& settings = chunk.optimizer[static_cast<std::size_t>(k)];
    if (settings.kind != kind) throw std::logic_error("a chunk's steps must share one optimizer");
    rules_staging_.get()[k] = rule_for(settings, chunk.grad_scale);
  }
  CNN_CHECK_CUDA(cudaMemcpyAsync(rules_.get(), rules_staging_.get(), static_cast<std::size_t>(steps) * sizeof(StepRule),
                                 cudaMemcpyHostToDevice, stream));
  *outcome_readback_.get() = SeedPersistentOutcome{};
  CNN_CHECK_CUDA(cudaMemcpyAsync(outcome_.get(), outcome_readback_.get(), sizeof(SeedPersistentOutcome),
                                 cudaMemcpyHostToDevice, stream));

  SeedPersistentArgs a;
  a.params = targets.params;
  a.grads = targets.grads;
  a.state = targets.optimizer_state;
  a.at = targets.at;
  a.images = targets.images;
  a.labels = targets.labels;
  a.order = targets.order + chunk.first;
  a.order_stride = chunk.stride;
  if (peers_ != nullptr) a.peers = peers_->view();
  a.steps = static_cast<int>(steps);
  a.rules = rules_.get();
  a.label_smoothing = targets.label_smoothing;
  a.nan_at = chunk.nan_at >= 0 && chunk.nan_at < steps ? static_cast<int>(chunk.nan_at) : -1;
  a.block_logits = block_logits_.get();
  a.grad_logits = grad_logits_.get();
  a.sample_loss = sample_loss_.get();
  a.sample_correct = sample_correct_.get();
  a.conv_partial = conv_partial_.get();
  a.verdict = verdict_.get();
  a.stop_request = stop_request_.get();
  a.host_stop = stop_word_device_;
  a.host_progress = progress_word_device_;
  *progress_word_ = 0;
  a.outcome = outcome_.get();
  a.clocks = clocks_.get();
  a.loss_sum = targets.loss_sum;
  a.correct = targets.correct;
  launch_seed_persistent(a, model_, plan, stream);

  CNN_CHECK_CUDA(cudaMemcpyAsync(outcome_readback_.get(), outcome_.get(), sizeof(SeedPersistentOutcome),
                                 cudaMemcpyDeviceToHost, stream));
  CNN_CHECK_CUDA(cudaMemcpyAsync(clocks_readback_.get(), clocks_.get(),
                                 static_cast<std::size_t>(4 * steps) * sizeof(unsigned long long),
                                 cudaMemcpyDeviceToHost, stream));
  wait_reporting_progress(chunk, stream);

  const SeedPersistentOutcome outcome = *outcome_readback_.get();
  StepChunkResult result;
  result.steps_done = outcome.steps_done;
  result.stop_seen = outcome.stop_seen != 0;
  if (outcome.nonfinite != kAllFinite) result.nonfinite_index = static_cast<std::int64_t>(outcome.nonfinite);
  const std::int64_t run = result.steps_done + (result.nonfinite_index >= 0 ? 1 : 0);
  const unsigned long long* clocks = clocks_readback_.get();
  for (std::int64_t k = 0; k < run; ++k) {
    ChunkStepTimes times;
    times.forward = seconds_between(clocks[4 * k], clocks[4 * k + 1]);
    times.backward = seconds_between(clocks[4 * k + 1], clocks[4 * k + 2]);
    times.update = seconds_between(clocks[4 * k + 2], clocks[4 * k + 3]);
    result.times.push_back(times);
  }
  return result;
}

}  // namespace cnn::cuda
