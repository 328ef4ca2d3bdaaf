// The fused CPU backend of the seed model. `seq` is the readable reference: the ops of ops.hpp in
// plain loops on one thread; `threads` runs the same loop body on every core (cpu_backend_base.hpp).
#include "cnn/cpu_backend.hpp"

#include <string>
#include <utility>
#include <vector>

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

class CpuBackend final : public CpuBackendBase {
 public:
  CpuBackend(const SeedModel& model, std::string kind, int threads, OptimizerKind optimizer, ParamLayout layout)
      : CpuBackendBase(std::move(kind), threads, layout, optimizer), model_(model), layout_(std::move(layout)) {
    for (int t = 0; t < this->threads(); ++t) scratch_.emplace_back(model_);
  }

 private:
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
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const SeedModel& model, const std::string& kind, int threads,
                                          OptimizerKind optimizer) {
  // `seq` is the one-thread reference by definition, whatever --threads says.
  return std::make_unique<CpuBackend>(model, kind, kind == "seq" ? 1 : threads, optimizer, model.layout());
}

}  // namespace cnn
