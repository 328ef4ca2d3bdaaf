// The fused CPU backend of the seed model. `seq` is the readable reference: the ops of ops.hpp in
// plain loops on one thread; `threads` runs the same loop body on every core (cpu_backend_base.hpp).
#include "cnn/cpu_backend.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cnn/nonfinite.hpp"
#include "cnn/ops.hpp"
#include "cpu_backend_base.hpp"

namespace cnn {

namespace {

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
      : input(kCpuMicroBatch * m.input.size()),
        labels(kCpuMicroBatch),
        pooled(kCpuMicroBatch * m.pooled().size()),
        argmax(kCpuMicroBatch * m.pooled().size()),
        logits(kCpuMicroBatch * m.classes),
        grad_logits(kCpuMicroBatch * m.classes),
        grad_pooled(kCpuMicroBatch * m.pooled().size()) {}
};

// The overlapped step keeps every sample's activations from its first pass (forward, loss, fc
// backward) to its second (conv backward): [samples of this thread's share, F, PH, PW].
struct HeldActivations {
  std::vector<float> pooled, grad_pooled;
  std::vector<std::uint8_t> argmax;

  void reserve(std::size_t floats) {
    if (pooled.size() >= floats) return;
    pooled.resize(floats);
    grad_pooled.resize(floats);
    argmax.resize(floats);
  }
};

class CpuBackend final : public CpuBackendBase {
 public:
  CpuBackend(const SeedModel& model, std::string kind, int threads, OptimizerKind optimizer, ParamLayout layout)
      : CpuBackendBase(std::move(kind), threads, layout, optimizer), model_(model), layout_(std::move(layout)) {
    for (int t = 0; t < this->threads(); ++t) scratch_.emplace_back(model_);
  }

  // The same sums as compute_gradients, bit for bit, in two passes: forward, loss and fc backward of
  // every micro-batch first, so the fc gradients of the whole local batch are final (and their
  // allreduce can start) before the conv backward runs; the master thread lets MPI progress between
  // the conv backward's micro-batches. Costs the held activations (about 9 bytes per pooled value).
  void compute_gradients_overlapped(std::int64_t first, std::int64_t count, GradientReadyListener& listener) override {
    const double start = wall_seconds();
    const std::int64_t cells = model_.pooled().size();
    const std::int64_t total = param_total();
    std::vector<BatchStats> stats(static_cast<std::size_t>(threads()));
    held_.resize(static_cast<std::size_t>(threads()));
    for_each_thread([&](int t) {
      const Range share = thread_share(count, t);
      float* g = thread_gradients(t);
      std::fill(g, g + total, 0.0f);
      HeldActivations& held = held_[static_cast<std::size_t>(t)];
      held.reserve(static_cast<std::size_t>(std::max<std::int64_t>(share.count, 1) * cells));
      for (std::int64_t done = 0; done < share.count; done += kCpuMicroBatch) {
        const std::int64_t mb = std::min(kCpuMicroBatch, share.count - done);
        fc_pass(epoch_order() + first + share.begin + done, mb, g, t, stats[static_cast<std::size_t>(t)], held,
                done * cells);
      }
    });
    double reduce = wall_seconds();
    sum_thread_gradients(fc_w(), total);
    const double fc_ready = wall_seconds();
    reduce = fc_ready - reduce;
    listener.gradients_ready(fc_w(), total - fc_w());
    for_each_thread([&](int t) {
      const Range share = thread_share(count, t);
      float* g = thread_gradients(t);
      HeldActivations& held = held_[static_cast<std::size_t>(t)];
      for (std::int64_t done = 0; done < share.count; done += kCpuMicroBatch) {
        const std::int64_t mb = std::min(kCpuMicroBatch, share.count - done);
        conv_pass(epoch_order() + first + share.begin + done, mb, g, t, held, done * cells);
        if (t == 0) listener.make_progress();
      }
    });
    const double conv_reduce_start = wall_seconds();
    sum_thread_gradients(0, fc_w());
    const double end = wall_seconds();
    reduce += end - conv_reduce_start;
    seconds_after_fc_ready_ = end - fc_ready;
    add_train_stats(stats);
    record_thread_times(reduce, end - start);
    listener.all_gradients_ready();
  }

  // The fc layer's gradients (weight, bias: the end of the flat buffer) first, then the conv layer's.
  std::vector<GradientReadyPoint> gradient_ready_points() override {
    return {GradientReadyPoint{fc_w(), param_total() - fc_w(), seconds_after_fc_ready_},
            GradientReadyPoint{0, fc_w(), 0.0}};
  }

 private:
  // The overlapped step's first pass over one micro-batch: as train_micro_batch up to the fc backward,
  // with pooled, argmax and grad_pooled written to `held` at `at` (the same values, the same order of
  // every sum into g).
  void fc_pass(const std::int32_t* indices, std::int64_t mb, float* g, int t, BatchStats& stats,
               HeldActivations& held, std::int64_t at) {
    Scratch& sc = scratch_[static_cast<std::size_t>(t)];
    ThreadTimes& times = thread_times(t);
    const float* p = param_data();
    const Dataset& train = train_data();
    float* pooled = held.pooled.data() + at;
    double t0 = wall_seconds();
    gather_normalize(sc.input.data(), train.images.data(), indices, mb, model_.input.size());
    gather_labels(sc.labels.data(), train.labels.data(), indices, mb);
    double t1 = wall_seconds();
    conv_relu_pool_forward(pooled, held.argmax.data() + at, sc.input.data(), p + conv_w(), p + conv_b(), mb, model_);
    fc_forward(sc.logits.data(), pooled, p + fc_w(), p + fc_b(), mb, model_.fc_inputs(), model_.classes);
    softmax_cross_entropy(sc.grad_logits.data(), &stats.loss_sum, &stats.correct, sc.logits.data(),
                          sc.labels.data(), mb, model_.classes);
    stats.count += mb;
    double t2 = wall_seconds();
    fc_backward(held.grad_pooled.data() + at, g + fc_w(), g + fc_b(), sc.grad_logits.data(), pooled, p + fc_w(), mb,
                model_.fc_inputs(), model_.classes);
    double t3 = wall_seconds();
    times.data += t1 - t0;
    times.forward += t2 - t1;
    times.backward += t3 - t2;
  }

  // The second pass: the conv backward of the micro-batch, its input gathered again (cheaper than
  // holding it).
  void conv_pass(const std::int32_t* indices, std::int64_t mb, float* g, int t, const HeldActivations& held,
                 std::int64_t at) {
    Scratch& sc = scratch_[static_cast<std::size_t>(t)];
    ThreadTimes& times = thread_times(t);
    double t0 = wall_seconds();
    gather_normalize(sc.input.data(), train_data().images.data(), indices, mb, model_.input.size());
    double t1 = wall_seconds();
    conv_relu_pool_backward(g + conv_w(), g + conv_b(), held.grad_pooled.data() + at, held.pooled.data() + at,
                            held.argmax.data() + at, sc.input.data(), mb, model_);
    double t2 = wall_seconds();
    times.data += t1 - t0;
    times.backward += t2 - t1;
  }

  // Gathers the samples data[indices[0..mb)] and runs conv-relu-pool and fc on them.
  void forward(const Dataset& data, const std::int32_t* indices, std::int64_t mb, Scratch& sc) {
    const float* p = param_data();
    gather_normalize(sc.input.data(), data.images.data(), indices, mb, model_.input.size());
    gather_labels(sc.labels.data(), data.labels.data(), indices, mb);
    conv_relu_pool_forward(sc.pooled.data(), sc.argmax.data(), sc.input.data(), p + conv_w(), p + conv_b(), mb,
                           model_);
    fc_forward(sc.logits.data(), sc.pooled.data(), p + fc_w(), p + fc_b(), mb, model_.fc_inputs(), model_.classes);
  }

  void evaluate_micro_batch(const std::int32_t* indices, std::int64_t mb, int t, BatchStats& stats) override {
    Scratch& sc = scratch_[static_cast<std::size_t>(t)];
    forward(test_data(), indices, mb, sc);
    softmax_cross_entropy(nullptr, &stats.loss_sum, &stats.correct, sc.logits.data(), sc.labels.data(), mb,
                          model_.classes);
    stats.count += mb;
  }

  void train_micro_batch(const std::int32_t* indices, std::int64_t mb, float* g, int t, BatchStats& stats,
                         ThreadTimes& times) override {
    Scratch& sc = scratch_[static_cast<std::size_t>(t)];
    const float* p = param_data();
    const Dataset& train = train_data();
    double t0 = wall_seconds();
    gather_normalize(sc.input.data(), train.images.data(), indices, mb, model_.input.size());
    gather_labels(sc.labels.data(), train.labels.data(), indices, mb);
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

  std::int64_t conv_w() const { return layout_.views()[0].offset; }
  std::int64_t conv_b() const { return layout_.views()[1].offset; }
  std::int64_t fc_w() const { return layout_.views()[2].offset; }
  std::int64_t fc_b() const { return layout_.views()[3].offset; }

  SeedModel model_;
  ParamLayout layout_;
  std::vector<Scratch> scratch_;
  std::vector<HeldActivations> held_;     // overlapped step only
  double seconds_after_fc_ready_ = 0.0;   // conv backward of the last overlapped step
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const SeedModel& model, const std::string& kind, int threads,
                                          OptimizerKind optimizer) {
  // `seq` is the one-thread reference by definition, whatever --threads says.
  return std::make_unique<CpuBackend>(model, kind, kind == "seq" ? 1 : threads, optimizer, model.layout());
}

}  // namespace cnn
