// The CPU backend of every network (cpu_backend.hpp): the threads, the flat buffers, the steps and the
// optimizer. One micro-batch on one thread is CpuOpRunner's (cpu_op_runner.hpp), each op's calls its
// CpuOp's (cpu_op.hpp, src/cpu/op_<name>.cpp).
#include "cnn/cpu_backend.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cnn/nonfinite.hpp"
#include "cpu/cpu_op_runner.hpp"

namespace cnn {

namespace {

struct ThreadTimes {
  double data = 0, forward = 0, backward = 0;
};

struct Range {
  std::int64_t begin, count;
};

// A piece of the overlapped step's backward: ops[top] down to ops[bottom], an op with parameters, over
// every micro-batch. When all threads are done, that op's gradients are final: a ready point.
struct BackwardSegment {
  std::size_t top, bottom;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Network& network, BackendKind kind, int threads, OptimizerKind optimizer, float label_smoothing,
             const Augment& augment)
      : network_(network),
        kind_(kind),
        augment_(augment),
        // `seq` is the reference: it never fuses.
        plan_(plan_ops(network_, kind == BackendKind::kSeq ? FusionTarget::kReference : FusionTarget::kCpu)),
        threads_(std::max(1, threads)),
        total_(network_.layout.total()),
        params_(static_cast<std::size_t>(total_)),
        grads_(static_cast<std::size_t>(total_)),
        optimizer_state_(static_cast<std::size_t>(total_ * optimizer_state_per_param(optimizer))),
        state_(network_.initial_state()),
        thread_times_(static_cast<std::size_t>(threads_)) {
    runners_.reserve(static_cast<std::size_t>(threads_));
    for (int t = 0; t < threads_; ++t) {
      runners_.emplace_back(plan_, network_, kind != BackendKind::kSeq, label_smoothing);
      thread_grads_.emplace_back(static_cast<std::size_t>(total_));
      runners_.back().set_state(state_.data());
    }
    // The backward from the op below the loss, cut after each op with parameters.
    std::size_t top = plan_.size() - 2;
    for (std::size_t i = top + 1; i-- > 0;)
      if (op(i).has_params()) {
        segments_.push_back({top, i});
        top = i - 1;
      }
    seconds_after_.assign(segments_.size(), 0.0);
  }

  std::string name() const override { return backend_kind_name(kind_); }
  std::string device_description() const override {
    return std::to_string(threads_) + (threads_ == 1 ? " CPU thread" : " CPU threads") + ", ops " +
           describe_ops(plan_);
  }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }

  void bind_data(const Dataset& train, const Dataset& test) override {
    train_ = &train;
    test_ = &test;
  }
  void upload_params(const std::vector<float>& host) override { params_ = host; }
  std::vector<float> download_params() override { return params_; }
  void upload_optimizer_state(const std::vector<float>& host) override { optimizer_state_ = host; }
  std::vector<float> download_optimizer_state() override { return optimizer_state_; }
  void upload_state(const std::vector<float>& host) override {
    if (host.size() != state_.size()) throw std::invalid_argument("upload_state: " + std::to_string(host.size()) +
                                                                   " values for a state of " + std::to_string(state_.size()));
    std::copy(host.begin(), host.end(), state_.begin());  // in place: the runners point into it
  }
  std::vector<float> download_state() override { return state_; }
  FlatSizes flat_sizes() const override {
    return {static_cast<std::int64_t>(params_.size()), static_cast<std::int64_t>(optimizer_state_.size()),
            static_cast<std::int64_t>(state_.size())};
  }
  void download_all(float* out) override {
    out = std::copy(params_.begin(), params_.end(), out);
    out = std::copy(optimizer_state_.begin(), optimizer_state_.end(), out);
    std::copy(state_.begin(), state_.end(), out);
  }
  void set_statistics_communicator(Communicator* ranks) override { statistics_ranks_ = ranks; }
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  std::int64_t first_nonfinite_grad() override { return first_nonfinite(grads_.data(), total_); }
  void begin_epoch(const std::vector<std::int32_t>& permutation) override { permutation_ = permutation; }

  // Each micro-batch: gather, forward, loss and the whole backward, while its activations are in cache.
  void compute_gradients(std::int64_t first, std::int64_t count) override {
    const double start = wall_seconds();
    std::vector<BatchStats> stats(static_cast<std::size_t>(threads_));
    const std::size_t below_loss = plan_.size() - 2, first_param = segments_.back().bottom;
    prepare_slice(count);
    double reduce_start = 0.0;
    // The threads' gradients are summed in the same parallel region, after a barrier: a region of its
    // own cost one more wake-up of the threads per step (with OMP_WAIT_POLICY=passive, tens of us:
    // several percent of a seed step at batch 100, about 0.8 ms on 2 threads).
    for_each_thread([&](int t) {
      const Range share = slice_share(count, t);
      float* g = thread_gradients(t);
      std::fill(g, g + total_, 0.0f);
      for (std::int64_t done = 0; done < share.count; done += micro_batch())
        train_micro_batch(t, first + share.begin + done, std::min(micro_batch(), share.count - done), 0, below_loss,
                          first_param, nullptr, stats[static_cast<std::size_t>(t)]);
#pragma omp barrier
      if (t == 0) reduce_start = wall_seconds();
      sum_share_of_thread_gradients(t, 0, total_);
    });
    for (const BatchStats& s : stats) train_stats_ += s;
    record_thread_times(wall_seconds() - reduce_start, wall_seconds() - start);
  }

  // The same sums as compute_gradients, bit for bit (each gradient element adds the same micro-batches
  // in the same order), in another order of work, so that each layer's gradients are final, summed
  // over the threads and handed to the listener (whose allreduce then runs) while the layers below are
  // still computing. First pass, per micro-batch of the thread's share while its activations are in
  // cache: forward, loss and the backward of the last layer with parameters. Then the backward of each
  // layer with parameters below it, segment by segment, over every micro-batch, from what the first
  // pass kept (CpuOp::keeps_output, keeps_own_data: about 9 bytes per pooled value for the seed model).
  // The master thread lets MPI progress between micro-batches once a reduction may be in flight.
  void compute_gradients_overlapped(std::int64_t first, std::int64_t count, GradientReadyListener& listener) override {
    const double start = wall_seconds();
    std::vector<BatchStats> stats(static_cast<std::size_t>(threads_));
    std::vector<double> ready(segments_.size());
    double reduce = 0.0;
    // Sums segment s's op's gradients over the threads and tells the listener.
    const auto finish_segment = [&](std::size_t s) {
      const CpuOp& params = op(segments_[s].bottom);
      const double reduce_start = wall_seconds();
      sum_thread_gradients(params.param_offset(), params.param_offset() + params.param_count());
      ready[s] = wall_seconds();
      reduce += ready[s] - reduce_start;
      listener.gradients_ready(params.param_offset(), params.param_count());
    };
    const BackwardSegment last_layer = segments_.front();
    prepare_slice(count);
    for_each_thread([&](int t) {
      CpuOpRunner& runner = runners_[static_cast<std::size_t>(t)];
      const Range share = slice_share(count, t);
      runner.keep_slots(micro_batches(share.count));
      float* g = thread_gradients(t);
      std::fill(g, g + total_, 0.0f);
      for (std::int64_t done = 0, slot = 0; done < share.count; done += micro_batch(), ++slot)
        train_micro_batch(t, first + share.begin + done, std::min(micro_batch(), share.count - done), slot,
                          last_layer.top, last_layer.bottom, input_gradient_kept(runner, last_layer.bottom, slot),
                          stats[static_cast<std::size_t>(t)]);
    });
    finish_segment(0);
    for (std::size_t s = 1; s < segments_.size(); ++s) {
      const BackwardSegment segment = segments_[s];
      for_each_thread([&](int t) {
        CpuOpRunner& runner = runners_[static_cast<std::size_t>(t)];
        ThreadTimes& times = thread_times_[static_cast<std::size_t>(t)];
        const Range share = slice_share(count, t);
        float* g = thread_gradients(t);
        for (std::int64_t done = 0, slot = 0; done < share.count; done += micro_batch(), ++slot) {
          const std::int64_t mb = std::min(micro_batch(), share.count - done);
          const double t0 = wall_seconds();
          // The first op reads the samples: gathered again, cheaper than keeping them.
          const std::int64_t at = first + share.begin + done;
          if (segment.bottom == 0) runner.gather(*train_, permutation_.data() + at, mb, true, augment_, mask_origin(at));
          const double t1 = wall_seconds();
          runner.backward(segment.top, segment.bottom, mb, slot, runner.kept_input_gradient(segments_[s - 1].bottom, slot),
                          input_gradient_kept(runner, segment.bottom, slot), params_.data(), g);
          times.data += t1 - t0;
          times.backward += wall_seconds() - t1;
          if (t == 0) listener.make_progress();  // MPI moves a non-blocking reduction only inside MPI calls
        }
      });
      finish_segment(s);
    }
    const double end = wall_seconds();
    for (std::size_t s = 0; s < segments_.size(); ++s) seconds_after_[s] = end - ready[s];
    for (const BatchStats& s : stats) train_stats_ += s;
    record_thread_times(reduce, end - start);
    listener.all_gradients_ready();
  }

  // One point per op with parameters (its weights and biases), from the last layer down, with the
  // backward time that followed it in the last overlapped step.
  std::vector<GradientReadyPoint> gradient_ready_points() override {
    std::vector<GradientReadyPoint> points;
    for (std::size_t s = 0; s < segments_.size(); ++s) {
      const CpuOp& params = op(segments_[s].bottom);
      points.push_back({params.param_offset(), params.param_count(), seconds_after_[s]});
    }
    return points;
  }

  void apply_update(const OptimizerSettings& settings, float grad_scale) override {
    const double start = wall_seconds();
    // Each thread updates a contiguous block; elements are independent, so the result does not
    // depend on the thread count. SGD and momentum cost about 0.07 ns per parameter on one thread
    // (the seed at d 64: 8 us a step), less than waking the threads for a region (tens of us with
    // OMP_WAIT_POLICY=passive): below a million parameters the calling thread does it alone.
    const bool light = settings.kind == OptimizerKind::kSgd || settings.kind == OptimizerKind::kMomentum;
    if (light && total_ < (std::int64_t{1} << 20)) {
      apply_optimizer(settings, params_.data(), optimizer_state_.data(), grads_.data(), total_, 0, total_, grad_scale);
      phase_times_.add(Phase::kUpdate, wall_seconds() - start);
      return;
    }
    for_each_thread([&](int t) {
      const Range share = thread_share(total_, t);
      apply_optimizer(settings, params_.data(), optimizer_state_.data(), grads_.data(), total_, share.begin,
                      share.count, grad_scale);
    });
    phase_times_.add(Phase::kUpdate, wall_seconds() - start);
  }

  BatchStats take_train_stats() override {
    const BatchStats s = train_stats_;
    train_stats_ = {};
    return s;
  }

  BatchStats evaluate(std::int64_t first, std::int64_t count) override { return evaluate_logits(first, count, nullptr); }

  // logits: nullptr, or [count, classes] floats that each micro-batch's logits are copied into.
  BatchStats evaluate_logits(std::int64_t first, std::int64_t count, float* logits) override {
    const double start = wall_seconds();
    const std::int64_t classes = network_.classes;
    std::vector<BatchStats> stats(static_cast<std::size_t>(threads_));
    for_each_thread([&](int t) {
      CpuOpRunner& runner = runners_[static_cast<std::size_t>(t)];
      const Range share = thread_share(count, t);
      std::vector<std::int32_t> indices(static_cast<std::size_t>(micro_batch()));
      for (std::int64_t done = 0; done < share.count; done += micro_batch()) {
        const std::int64_t mb = std::min(micro_batch(), share.count - done);
        for (std::int64_t s = 0; s < mb; ++s) indices[s] = static_cast<std::int32_t>(first + share.begin + done + s);
        runner.gather(*test_, indices.data(), mb);
        runner.forward(params_.data(), mb, 0, false, stats[static_cast<std::size_t>(t)]);
        if (logits != nullptr)
          std::memcpy(logits + (share.begin + done) * classes, runner.logits(),
                      static_cast<std::size_t>(mb * classes) * sizeof(float));
      }
    });
    BatchStats total;
    for (const BatchStats& s : stats) total += s;
    phase_times_.add(Phase::kEval, wall_seconds() - start);
    return total;
  }

  PhaseTimes take_phase_times() override {
    const PhaseTimes t = phase_times_;
    phase_times_ = {};
    return t;
  }

 private:
  // A network with bn layers needs sums over the whole slice of `count` samples in the middle of its
  // forward and backward: each thread then runs its share as one micro-batch, and the threads with
  // samples meet in slice_sums_ (in thread order). Without bn, nothing changes.
  void prepare_slice(std::int64_t count) {
    if (!network_.has_batch_norm()) return;
    // Every runner alike: the step's loops take micro_batch() from the first.
    const std::int64_t largest_share = (count + threads_ - 1) / threads_;
    int participants = 0;
    for (int t = 0; t < threads_; ++t) {
      CpuOpRunner& runner = runners_[static_cast<std::size_t>(t)];
      runner.grow_micro_batch(largest_share);
      runner.set_slice({&slice_sums_, slice_share(count, t).count > 0 ? participants++ : -1});
    }
    slice_sums_.begin_step(participants, statistics_ranks_);
  }

  // Thread t's share of a training step's `count` samples: thread_share, except that a network with
  // bn on fewer samples than threads gives one sample each to the first threads, so that thread 0,
  // the one that may call MPI (MPI_THREAD_FUNNELED), always takes part in the sums.
  Range slice_share(std::int64_t count, int t) const {
    if (!network_.has_batch_norm() || count >= threads_) return thread_share(count, t);
    return t < count ? Range{t, 1} : Range{count, 0};
  }

  // Thread t's contiguous share of n items.
  Range thread_share(std::int64_t n, int t) const {
    const std::int64_t begin = n * t / threads_, end = n * (t + 1) / threads_;
    return {begin, end - begin};
  }

  // body(t) on every thread t (on the caller's thread alone for one thread).
  template <typename Body>
  void for_each_thread(Body body) {
    if (threads_ == 1) {
      body(0);
      return;
    }
#pragma omp parallel num_threads(threads_)
    body(omp_get_thread_num());
  }

  float* thread_gradients(int t) { return thread_grads_[static_cast<std::size_t>(t)].data(); }

  // Thread t, the mb samples at permutation_[at ..), while their activations are in cache: gather,
  // forward and loss, then the backward of ops[top .. bottom] into thread t's gradients, writing
  // ops[bottom]'s input gradient to grad_in (nullptr: none). Both steps' per-micro-batch work: the
  // plain one runs the whole backward here, the overlapped one its first segment.
  void train_micro_batch(int t, std::int64_t at, std::int64_t mb, std::int64_t slot, std::size_t top,
                         std::size_t bottom, float* grad_in, BatchStats& stats) {
    CpuOpRunner& runner = runners_[static_cast<std::size_t>(t)];
    ThreadTimes& times = thread_times_[static_cast<std::size_t>(t)];
    const double t0 = wall_seconds();
    runner.gather(*train_, permutation_.data() + at, mb, false, augment_, mask_origin(at));
    const double t1 = wall_seconds();
    runner.forward(params_.data(), mb, slot, true, stats, mask_origin(at));
    const double t2 = wall_seconds();
    runner.backward(top, bottom, mb, slot, runner.loss_gradient(), grad_in, params_.data(), thread_gradients(t));
    times.data += t1 - t0;
    times.forward += t2 - t1;
    times.backward += wall_seconds() - t2;
  }

  // Where the overlapped step keeps the gradient of ops[i]'s input for the next segment; nullptr when
  // ops[i] passes none back.
  float* input_gradient_kept(CpuOpRunner& runner, std::size_t i, std::int64_t slot) const {
    return op(i).needs_input_grad() ? runner.kept_input_gradient(i, slot) : nullptr;
  }

  // Op i's sizes and parameter range, the same in every thread's runner.
  const CpuOp& op(std::size_t i) const { return runners_.front().op(i); }
  // Samples per micro-batch, the same in every thread's runner, and how many micro-batches hold `samples`.
  std::int64_t micro_batch() const { return runners_.front().micro_batch(); }
  std::int64_t micro_batches(std::int64_t samples) const { return (samples + micro_batch() - 1) / micro_batch(); }

  // grads[begin, end) = thread_grads[0] + thread_grads[1] + ... in thread order. Split over the
  // threads by element; each element is summed in thread order whatever the split.
  void sum_thread_gradients(std::int64_t begin, std::int64_t end) {
    for_each_thread([&](int t) { sum_share_of_thread_gradients(t, begin, end); });
  }

  // Thread t's share of sum_thread_gradients(begin, end).
  void sum_share_of_thread_gradients(int t, std::int64_t begin, std::int64_t end) {
    Range share = thread_share(end - begin, t);
    share.begin += begin;
    float* out = grads_.data() + share.begin;
    std::memcpy(out, thread_grads_[0].data() + share.begin, static_cast<std::size_t>(share.count) * sizeof(float));
    for (int u = 1; u < threads_; ++u) {
      const float* in = thread_grads_[static_cast<std::size_t>(u)].data() + share.begin;
#pragma omp simd
      for (std::int64_t i = 0; i < share.count; ++i) out[i] += in[i];
    }
  }

  // Phases inside the parallel regions are the mean over threads, scaled to fill the regions' wall
  // time (thread start-up and waits for the slowest thread included), so that the phases of a step
  // add up to its wall time (docs/LOGS.md). The reductions count as backward.
  void record_thread_times(double reduce_seconds, double total_seconds) {
    ThreadTimes mean;
    for (ThreadTimes& t : thread_times_) {
      mean.data += t.data / threads_;
      mean.forward += t.forward / threads_;
      mean.backward += t.backward / threads_;
      t = {};
    }
    const double measured = mean.data + mean.forward + mean.backward;
    const double region = total_seconds - reduce_seconds;
    const double scale = measured > 0.0 && region > 0.0 ? region / measured : 1.0;
    phase_times_.add(Phase::kData, mean.data * scale);
    phase_times_.add(Phase::kForward, mean.forward * scale);
    phase_times_.add(Phase::kBackward, mean.backward * scale + reduce_seconds);
  }

  const Network network_;  // the runners' ops point into its layers
  const BackendKind kind_;
  const Augment augment_;  // the training batches' (--augment); evaluation gathers plainly
  const std::vector<Op> plan_;
  const int threads_;
  const std::int64_t total_;
  std::vector<float> params_, grads_, optimizer_state_;
  std::vector<float> state_;  // the bn layers' running statistics (Network::state_count)
  SliceSums slice_sums_;
  Communicator* statistics_ranks_ = nullptr;  // bn's global statistics; nullptr: --bn-local or one rank
  std::vector<std::vector<float>> thread_grads_;
  std::vector<CpuOpRunner> runners_;
  std::vector<ThreadTimes> thread_times_;
  std::vector<BackwardSegment> segments_;  // in backward order; the last ends at the first op with parameters
  std::vector<double> seconds_after_;      // per segment, from the last overlapped step
  const Dataset* train_ = nullptr;
  const Dataset* test_ = nullptr;
  std::vector<std::int32_t> permutation_;
  BatchStats train_stats_;
  PhaseTimes phase_times_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Network& network, const BackendOptions& options) {
  if (options.kind != BackendKind::kSeq && options.kind != BackendKind::kThreads)
    throw std::logic_error("make_cpu_backend: not a CPU backend kind");
  // `seq` is the one-thread reference by definition, whatever --threads says.
  const int threads = options.kind == BackendKind::kSeq ? 1 : options.threads;
  return std::make_unique<CpuBackend>(network, options.kind, threads, options.optimizer, options.label_smoothing,
                                      options.augment);
}

}  // namespace cnn
