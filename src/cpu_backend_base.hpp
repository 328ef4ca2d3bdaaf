// What the two CPU backends (the fused seed one, src/cpu_backend.cpp, and the layer-by-layer one,
// src/cpu_layer_backend.cpp) share: the host buffers, the threading and the fixed-order reductions.
// `seq` and `threads` run the very same loop body: each thread takes a contiguous share of the step's
// samples in micro-batches and sums their gradients into its own buffer; the buffers are then added
// in thread order, so a run is bitwise reproducible for a given thread count. Private to src/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <omp.h>

#include "cnn/backend.hpp"
#include "cnn/nonfinite.hpp"

namespace cnn {

// Samples processed together by one thread: the activations of a micro-batch stay in cache, and the
// fc weight gradients are read and written once per micro-batch rather than once per sample.
inline constexpr std::int64_t kCpuMicroBatch = 32;

struct ThreadTimes {
  double data = 0, forward = 0, backward = 0;
};

class CpuBackendBase : public Backend {
 public:
  CpuBackendBase(std::string kind, int threads, const ParamLayout& layout, OptimizerKind optimizer);

  std::string name() const override { return kind_; }
  std::string device_description() const override;
  MemorySpace memory_space() const override { return MemorySpace::kHost; }

  void bind_data(const Dataset& train, const Dataset& test) override;
  void upload_params(const std::vector<float>& host) override { params_ = host; }
  std::vector<float> download_params() override { return params_; }
  void upload_optimizer_state(const std::vector<float>& host) override { optimizer_state_ = host; }
  std::vector<float> download_optimizer_state() override { return optimizer_state_; }
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  std::int64_t first_nonfinite_grad() override { return first_nonfinite(grads_.data(), total_); }

  void begin_epoch(const std::vector<std::int32_t>& permutation) override { permutation_ = permutation; }
  void compute_gradients(std::int64_t first, std::int64_t count) override;
  void apply_update(const OptimizerSettings& settings, float grad_scale) override;
  BatchStats take_train_stats() override;
  BatchStats evaluate(std::int64_t first, std::int64_t count) override;
  PhaseTimes take_phase_times() override;

 protected:
  // Thread t: the samples train[indices[0..mb)] -> forward, loss, backward; gradients ADDED to g.
  virtual void train_micro_batch(const std::int32_t* indices, std::int64_t mb, float* g, int t, BatchStats& stats,
                                 ThreadTimes& times) = 0;
  // Thread t: loss and correct count of test[indices[0..mb)], added to stats.
  virtual void evaluate_micro_batch(const std::int32_t* indices, std::int64_t mb, int t, BatchStats& stats) = 0;

  int threads() const { return threads_; }
  const float* param_data() const { return params_.data(); }
  const Dataset& train_data() const { return *train_; }
  const Dataset& test_data() const { return *test_; }

 protected:
  struct Range {
    std::int64_t begin, count;
  };
  // Thread t's contiguous share of n items.
  Range thread_share(std::int64_t n, int t) const;
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
  // grads = thread_grads[0] + thread_grads[1] + ... in thread order, over [begin, end) of the buffer.
  void sum_thread_gradients() { sum_thread_gradients(0, total_); }
  void sum_thread_gradients(std::int64_t begin, std::int64_t end);
  void record_thread_times(double reduce_seconds, double total_seconds);
  // For a derived backend's own step (the seed backend's overlapped one).
  float* thread_gradients(int t) { return thread_grads_[static_cast<std::size_t>(t)].data(); }
  ThreadTimes& thread_times(int t) { return thread_times_[static_cast<std::size_t>(t)]; }
  const std::int32_t* epoch_order() const { return permutation_.data(); }
  void add_train_stats(const std::vector<BatchStats>& stats) {
    for (const BatchStats& s : stats) train_stats_ += s;
  }
  std::int64_t param_total() const { return total_; }

 private:
  std::string kind_;
  int threads_;
  std::int64_t total_;
  std::vector<float> params_, grads_, optimizer_state_;
  std::vector<std::vector<float>> thread_grads_;
  std::vector<ThreadTimes> thread_times_;
  const Dataset* train_ = nullptr;
  const Dataset* test_ = nullptr;
  std::vector<std::int32_t> permutation_;
  BatchStats train_stats_;
  PhaseTimes phase_times_;
};

}  // namespace cnn
