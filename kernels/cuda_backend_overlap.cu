// CudaBackend's overlapped step (see cuda_backend.hpp and include/cnn/gradient_ready.hpp).
//
// When the listener starts an allreduce before the end (its bucket plan has an early bucket), the
// backward runs fc-first (seed_step.hpp): the fc gradients, 99% of the buffer, are computed in passes
// of their own, so their allreduce runs under the conv layer's sweep; that costs one more read of the
// pooled activations. Otherwise the fused backward runs and everything is reduced at the end. The
// bucket planner and the scaling advisor decide from measured times which of the two pays. Either
// way the communication sits in the step's CUDA graph: no host synchronisation and no host launch
// between the backward and the allreduce, or between the allreduce and the update.
#include <string>
#include <vector>

#include "cnn/errors.hpp"
#include "cuda_backend.hpp"
#include "cuda_check.hpp"

namespace cnn::cuda {

void CudaBackend::enqueue_overlapped_step(const SeedStepPlan& plan, const std::int32_t* indices, bool timed,
                                          GradientReadyListener& listener) {
  enqueue_data_and_forward(plan, indices, timed);
  if (listener.reduces_early()) {
    const std::int64_t fc_offset = layout_.find("fc.weight").offset;
    seed_backward_stage(step_tensors(), model_, plan, stream_, [&] {
      listener.gradients_ready(fc_offset, layout_.total() - fc_offset);
      if (timed) after_fc_ready_.start(stream_);
    });
    if (timed) after_fc_ready_.end(stream_);
  } else {
    seed_backward_stage(step_tensors(), model_, plan, stream_);
  }
  listener.all_gradients_ready();
  if (timed) timer_->close(Phase::kBackward);
}

void CudaBackend::drop_overlapped_graphs() noexcept {
  for (auto& [n, step] : overlapped_graphs_) destroy_step_graph(step);
  overlapped_graphs_.clear();
}

StepGraph& CudaBackend::overlapped_graph_for(std::int64_t n, GradientReadyListener& listener) {
  if (listener.generation() != overlapped_generation_) {
    drop_overlapped_graphs();
    overlapped_generation_ = listener.generation();
  }
  auto found = overlapped_graphs_.find(n);
  if (found != overlapped_graphs_.end()) return found->second;
  const SeedStepPlan plan = plan_seed_step(model_, n, fused_forward_);
  StepGraph step;
  capture_step_graph(
      step, stream_, [&] { enqueue_overlapped_step(plan, data_.order.get(), false, listener); },
      batch_indices_.get(), "rerun with --overlap off and report this");
  return overlapped_graphs_.emplace(n, step).first->second;
}

void CudaBackend::compute_gradients_overlapped(std::int64_t first, std::int64_t count,
                                               GradientReadyListener& listener) {
  if (count == 0 || !listener.stream_ordered()) {
    // Nothing to overlap (an empty slice), or a host-side reduction (MPI through host memory) that
    // cannot run under device work without blocking the host: the plain step, then all at once.
    compute_gradients(first, count);
    listener.all_gradients_ready();
    return;
  }
  if (first < 0 || first + count > data_.order_size)
    throw Error(ExitCode::kFailure, "internal error: samples [" + std::to_string(first) + ", " +
                                        std::to_string(first + count) + ") lie outside this epoch's order of " +
                                        std::to_string(data_.order_size) + " (was begin_epoch called?)");
  ensure_batch_capacity(count);
  const std::int32_t* indices = data_.order.get() + first;
  const bool have_graph = overlapped_generation_ == listener.generation() && overlapped_graphs_.count(count) != 0;
  if (!use_graphs_ || eager_overlapped_step_ || !have_graph) {
    // Eager: the first step of an epoch or of a batch size (timed phase by phase, and its
    // communication by the communicator's events), or every step with CNN_CUDA_GRAPHS=0.
    timer_->open();
    enqueue_overlapped_step(plan_seed_step(model_, count, fused_forward_), indices, true, listener);
    eager_overlapped_step_ = false;
    if (use_graphs_) overlapped_graph_for(count, listener);
  } else {
    const StepGraph& step = overlapped_graph_for(count, listener);
    timer_->open();
    launch_step_graph(step, batch_indices_.get(), indices, count, stream_);
    timer_->close_graph_step();
  }
  train_samples_ += count;
}

std::vector<GradientReadyPoint> CudaBackend::gradient_ready_points() {
  const std::int64_t fc_offset = layout_.find("fc.weight").offset;
  // Measured only by an eager fc-first step (the advisor runs one with a bucket at every point).
  const double after = after_fc_ready_.measured() ? after_fc_ready_.seconds() : 0.0;
  return {GradientReadyPoint{fc_offset, layout_.total() - fc_offset, after}, GradientReadyPoint{0, fc_offset, 0.0}};
}

}  // namespace cnn::cuda
