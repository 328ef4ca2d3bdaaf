#include "cnn/cpu_backend.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cnn/nonfinite.hpp"
#include "cnn/ops.hpp"

namespace cnn {

namespace {

// Samples processed together by one thread: the activations of a micro-batch stay in cache, and the
// fc weight gradient is read and written once per micro-batch rather than once per sample.
constexpr std::int64_t kMicroBatch = 32;

// Activations and gradients of one micro-batch, per thread.
struct Scratch {
  std::vector<float> input;         // [mb, C, H, W]
  std::vector<std::uint8_t> labels; // [mb]
  std::vector<float> pooled;        // [mb, F, PH, PW]
  std::vector<std::uint8_t> argmax; // [mb, F, PH, PW]
  std::vector<float> logits;        // [mb, classes]
  std::vector<float> grad_logits;   // [mb, classes]
  std::vector<float> grad_pooled;   // [mb, F, PH, PW]

  explicit Scratch(const SeedModel& m)
      : input(kMicroBatch * m.input.size()),
        labels(kMicroBatch),
        pooled(kMicroBatch * m.pooled().size()),
        argmax(kMicroBatch * m.pooled().size()),
        logits(kMicroBatch * m.classes),
        grad_logits(kMicroBatch * m.classes),
        grad_pooled(kMicroBatch * m.pooled().size()) {}
};

struct ThreadTimes {
  double data = 0, forward = 0, backward = 0;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const SeedModel& model, std::string kind, int threads, OptimizerKind optimizer)
      : kind_(std::move(kind)),
        model_(model),
        layout_(model.layout()),
        threads_(std::max(1, threads)),
        params_(static_cast<std::size_t>(layout_.total())),
        grads_(static_cast<std::size_t>(layout_.total())),
        optimizer_state_(static_cast<std::size_t>(layout_.total() * optimizer_state_per_param(optimizer))) {
    for (int t = 0; t < threads_; ++t) {
      scratch_.emplace_back(model_);
      thread_grads_.emplace_back(static_cast<std::size_t>(layout_.total()));
    }
    thread_times_.resize(static_cast<std::size_t>(threads_));
  }

  std::string name() const override { return kind_; }
  std::string device_description() const override {
    return std::to_string(threads_) + (threads_ == 1 ? " CPU thread" : " CPU threads");
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
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }

  void begin_epoch(const std::vector<std::int32_t>& permutation) override { permutation_ = permutation; }

  void compute_gradients(std::int64_t first, std::int64_t count) override {
    const double start = wall_seconds();
    std::vector<BatchStats> stats(static_cast<std::size_t>(threads_));
    for_each_thread([&](int t) {
      const Range share = rank_share(count, t);
      float* g = thread_grads_[static_cast<std::size_t>(t)].data();
      std::fill(g, g + layout_.total(), 0.0f);
      for (std::int64_t done = 0; done < share.count; done += kMicroBatch) {
        const std::int64_t mb = std::min(kMicroBatch, share.count - done);
        train_micro_batch(permutation_.data() + first + share.begin + done, mb, g, t,
                          stats[static_cast<std::size_t>(t)]);
      }
    });
    const double reduce_start = wall_seconds();
    sum_thread_gradients();
    for (const BatchStats& s : stats) train_stats_ += s;
    record_thread_times(wall_seconds() - reduce_start, wall_seconds() - start);
  }

  std::int64_t first_nonfinite_grad() override { return first_nonfinite(grads_.data(), layout_.total()); }

  void apply_update(const OptimizerSettings& settings, float grad_scale) override {
    const double start = wall_seconds();
    const std::int64_t n = layout_.total();
    // Each thread updates a contiguous block; elements are independent, so the result does not
    // depend on the thread count.
    for_each_thread([&](int t) {
      const Range share = rank_share(n, t);
      float* p = params_.data() + share.begin;
      const float* g = grads_.data() + share.begin;
      if (settings.kind == OptimizerKind::kSgd)
        sgd_update(p, g, share.count, settings.lr, grad_scale);
      else
        momentum_update(p, optimizer_state_.data() + share.begin, g, share.count, settings.lr, settings.momentum,
                        grad_scale);
    });
    phase_times_.add(Phase::kUpdate, wall_seconds() - start);
  }

  BatchStats take_train_stats() override {
    BatchStats s = train_stats_;
    train_stats_ = {};
    return s;
  }

  BatchStats evaluate(std::int64_t first, std::int64_t count) override {
    const double start = wall_seconds();
    std::vector<BatchStats> stats(static_cast<std::size_t>(threads_));
    for_each_thread([&](int t) {
      const Range share = rank_share(count, t);
      Scratch& sc = scratch_[static_cast<std::size_t>(t)];
      std::vector<std::int32_t> indices(kMicroBatch);
      for (std::int64_t done = 0; done < share.count; done += kMicroBatch) {
        const std::int64_t mb = std::min(kMicroBatch, share.count - done);
        for (std::int64_t s = 0; s < mb; ++s) indices[s] = static_cast<std::int32_t>(first + share.begin + done + s);
        forward(*test_, indices.data(), mb, sc);
        BatchStats& st = stats[static_cast<std::size_t>(t)];
        softmax_cross_entropy(nullptr, &st.loss_sum, &st.correct, sc.logits.data(), sc.labels.data(), mb,
                              model_.classes);
        st.count += mb;
      }
    });
    BatchStats total;
    for (const BatchStats& s : stats) total += s;
    phase_times_.add(Phase::kEval, wall_seconds() - start);
    return total;
  }

  PhaseTimes take_phase_times() override {
    PhaseTimes t = phase_times_;
    phase_times_ = {};
    return t;
  }

 private:
  struct Range {
    std::int64_t begin, count;
  };

  // Thread t's contiguous share of n items.
  Range rank_share(std::int64_t n, int t) const {
    const std::int64_t begin = n * t / threads_, end = n * (t + 1) / threads_;
    return {begin, end - begin};
  }

  template <typename Body>
  void for_each_thread(Body body) {
    if (threads_ == 1) {
      body(0);
      return;
    }
#pragma omp parallel num_threads(threads_)
    body(omp_get_thread_num());
  }

  // Gathers the samples train[indices[0..mb)] and runs conv-relu-pool and fc on them.
  void forward(const Dataset& data, const std::int32_t* indices, std::int64_t mb, Scratch& sc) {
    const float* p = params_.data();
    gather_normalize(sc.input.data(), data.images.data(), indices, mb, model_.input.size());
    gather_labels(sc.labels.data(), data.labels.data(), indices, mb);
    conv_relu_pool_forward(sc.pooled.data(), sc.argmax.data(), sc.input.data(), p + conv_w(), p + conv_b(), mb,
                           model_);
    fc_forward(sc.logits.data(), sc.pooled.data(), p + fc_w(), p + fc_b(), mb, model_.fc_inputs(), model_.classes);
  }

  void train_micro_batch(const std::int32_t* indices, std::int64_t mb, float* g, int t, BatchStats& stats) {
    Scratch& sc = scratch_[static_cast<std::size_t>(t)];
    ThreadTimes& times = thread_times_[static_cast<std::size_t>(t)];
    const float* p = params_.data();
    double t0 = wall_seconds();
    gather_normalize(sc.input.data(), train_->images.data(), indices, mb, model_.input.size());
    gather_labels(sc.labels.data(), train_->labels.data(), indices, mb);
    double t1 = wall_seconds();
    conv_relu_pool_forward(sc.pooled.data(), sc.argmax.data(), sc.input.data(), p + conv_w(), p + conv_b(), mb,
                           model_);
    fc_forward(sc.logits.data(), sc.pooled.data(), p + fc_w(), p + fc_b(), mb, model_.fc_inputs(), model_.classes);
    softmax_cross_entropy(sc.grad_logits.data(), &stats.loss_sum, &stats.correct, sc.logits.data(),
                          sc.labels.data(), mb, model_.classes);
    stats.count += mb;
    double t2 = wall_seconds();
    fc_backward(sc.grad_pooled.data(), g + fc_w(), g + fc_b(), sc.grad_logits.data(), sc.pooled.data(), p + fc_w(),
                mb, model_.fc_inputs(), model_.classes);
    conv_relu_pool_backward(g + conv_w(), g + conv_b(), sc.grad_pooled.data(), sc.pooled.data(), sc.argmax.data(),
                            sc.input.data(), mb, model_);
    double t3 = wall_seconds();
    times.data += t1 - t0;
    times.forward += t2 - t1;
    times.backward += t3 - t2;
  }

  // grads = thread_grads[0] + thread_grads[1] + ... in thread order, split over the threads by element.
  void sum_thread_gradients() {
    const std::int64_t n = layout_.total();
    for_each_thread([&](int t) {
      const Range share = rank_share(n, t);
      float* out = grads_.data() + share.begin;
      std::memcpy(out, thread_grads_[0].data() + share.begin, static_cast<std::size_t>(share.count) * sizeof(float));
      for (int u = 1; u < threads_; ++u) {
        const float* in = thread_grads_[static_cast<std::size_t>(u)].data() + share.begin;
#pragma omp simd
        for (std::int64_t i = 0; i < share.count; ++i) out[i] += in[i];
      }
    });
  }

  // Phases inside the parallel region are the mean over threads, scaled to fill the region's wall time
  // (thread start-up and waits for the slowest thread included), so that the phases of a step add up
  // to its wall time (docs/LOGS.md). The final reduction counts as backward.
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

  std::int64_t conv_w() const { return layout_.views()[0].offset; }
  std::int64_t conv_b() const { return layout_.views()[1].offset; }
  std::int64_t fc_w() const { return layout_.views()[2].offset; }
  std::int64_t fc_b() const { return layout_.views()[3].offset; }

  std::string kind_;
  SeedModel model_;
  ParamLayout layout_;
  int threads_;
  std::vector<float> params_, grads_, optimizer_state_;
  std::vector<Scratch> scratch_;
  std::vector<std::vector<float>> thread_grads_;
  std::vector<ThreadTimes> thread_times_;
  const Dataset* train_ = nullptr;
  const Dataset* test_ = nullptr;
  std::vector<std::int32_t> permutation_;
  BatchStats train_stats_;
  PhaseTimes phase_times_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const SeedModel& model, const std::string& kind, int threads,
                                          OptimizerKind optimizer) {
  // `seq` is the one-thread reference by definition, whatever --threads says.
  return std::make_unique<CpuBackend>(model, kind, kind == "seq" ? 1 : threads, optimizer);
}

}  // namespace cnn
