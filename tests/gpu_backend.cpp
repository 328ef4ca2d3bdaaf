// The cuda backend of the seed model (its one fused op, conv_relu_pool_fc_softmax) against the CPU
// reference:
//   1. one whole training step of make_cuda_backend against `seq` (and float64): loss and every
//      gradient; evaluation and its logits; one update;
//   2. determinism: identical runs (graphs on, graphs on again, graphs off) give identical bits, and the
//      overlapped step's fc-first backward gives the plain step's bits;
//   3. (disabled unless named: --run_test=measure_epoch_time, measure_fc_first, profile_steps) ms per
//      epoch at the benchmark settings; the fc-first backward's cost against the fused one; a few
//      eager steps for a kernel profiler.
// Its kernels one by one: gpu_backend_kernels.cpp; dropout's masks and --augment against seq:
// gpu_backend_randomness.cpp.
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_backend
#include "boost_test.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/cuda_backend.hpp"
#include "cnn/gradient_ready.hpp"
#include "cnn/model.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/network.hpp"
#include "cnn/sampler.hpp"
#include "gpu_backend_checks.hpp"
#include "gpu_seed_fixtures.hpp"
#include "gpu_test_util.hpp"

namespace {

using namespace cnn::gpu_test;  // tests/gpu_test_util.hpp, gpu_seed_fixtures.hpp, gpu_backend_checks.hpp

struct RequireGpu {
  RequireGpu() { require_gpu(); }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

// ---- 1. one step against seq ---------------------------------------------------------------------

struct SeqStep {
  std::int64_t count = 0;
  std::vector<float> grads;
  cnn::BatchStats stats;
  std::vector<double> exact;  // float64
  double exact_loss = 0.0;
};

// The cuda backend for the seed model: its one fused op, conv_relu_pool_fc_softmax.
std::unique_ptr<cnn::Backend> make_cuda(const cnn::SeedModel& m, bool graphs = true,
                                        cnn::OptimizerKind optimizer = cnn::OptimizerKind::kSgd) {
  auto backend = make("cuda", m, optimizer, graphs);
  BOOST_TEST(backend->device_description().find("ops conv_relu_pool_fc_softmax,") != std::string::npos,
             backend->device_description());
  return backend;
}

// A gradient passes when it is within kTolerance of seq, or, failing that, when it is at least as
// close to the float64 result as seq's is (seq's own float32 rounding then dominates the difference).
BOOST_AUTO_TEST_CASE(one_step_matches_seq) {
  for (int filters : {32, 64, 256}) {
    BOOST_TEST_CONTEXT("d=" << filters) {
      const cnn::SeedModel m = seed_model(filters);
      const cnn::ParamLayout layout = m.layout();
      const RandomData data = random_dataset(m, 3000, 700, 100 + filters);
      const auto params = initial_params(m, 42);
      const auto permutation = cnn::Sampler(5, data.train.count()).permutation(0);
      const std::int64_t first = 123;
      auto seq = make("seq", m);
      seq->bind_data(data.train, data.test);
      seq->upload_params(params);
      seq->begin_epoch(permutation);
      std::vector<SeqStep> reference;
      for (std::int64_t count : {std::int64_t{256}, std::int64_t{1000}, std::int64_t{77}}) {
        SeqStep step;
        step.count = count;
        seq->compute_gradients(first, count);
        step.grads.assign(seq->grads(), seq->grads() + layout.total());
        step.stats = seq->take_train_stats();
        step.exact = float64_gradients(m, params, data.train, permutation, first, count, step.exact_loss);
        reference.push_back(std::move(step));
      }
      const cnn::BatchStats seq_eval = seq->evaluate(50, 600);
      std::vector<float> seq_logits(600 * 10);
      seq->evaluate_logits(50, 600, seq_logits.data());
      cnn::OptimizerSettings sgd;
      seq->compute_gradients(0, 500);
      seq->apply_update(sgd, 1.0f / 500);
      const std::vector<float> seq_updated = seq->download_params();

      auto gpu = make_cuda(m);
      BOOST_TEST_MESSAGE("cuda device: " << gpu->device_description());
      gpu->bind_data(data.train, data.test);
      gpu->upload_params(params);
      gpu->begin_epoch(permutation);
      for (const SeqStep& want : reference) {
        gpu->compute_gradients(first, want.count);
        const std::vector<float> got = download_grads(*gpu, layout.total());
        for (const cnn::ParamView& view : layout.views())
          BOOST_TEST_CONTEXT("count=" << want.count << " gradient " << view.name()) {
            const auto at = static_cast<std::size_t>(view.offset);
            const auto size = static_cast<std::size_t>(view.size);
            const double vs_seq = relative_error(got.data() + at, want.grads.data() + at, size);
            const double gpu_exact = relative_error64(got.data() + at, want.exact.data() + at, size);
            const double seq_exact = relative_error64(want.grads.data() + at, want.exact.data() + at, size);
            BOOST_TEST_MESSAGE("d=" << filters << " count=" << want.count << " "
                                    << view.name() << ": rel err vs seq " << vs_seq << "; vs float64: cuda "
                                    << gpu_exact << ", seq " << seq_exact);
            BOOST_TEST((vs_seq <= kTolerance || gpu_exact <= seq_exact),
                       view.name() << ": relative error " << vs_seq << " vs seq; vs float64 cuda " << gpu_exact
                                   << ", seq " << seq_exact);
          }
        const cnn::BatchStats g = gpu->take_train_stats();
        BOOST_TEST(g.count == want.stats.count);
        BOOST_TEST(std::fabs(g.loss_sum - want.stats.loss_sum) <= kTolerance * std::fabs(want.stats.loss_sum),
                   "train loss sum " << g.loss_sum << " vs seq " << want.stats.loss_sum << " (float64 "
                                     << want.exact_loss << ")");
        BOOST_TEST(g.correct == want.stats.correct);
      }
      // An empty slice writes zeros.
      gpu->compute_gradients(0, 0);
      const std::vector<float> zeros = download_grads(*gpu, layout.total());
      BOOST_TEST(std::all_of(zeros.begin(), zeros.end(), [](float v) { return v == 0.0f; }));

      const cnn::BatchStats ge = gpu->evaluate(50, 600);
      BOOST_TEST(ge.count == seq_eval.count);
      BOOST_TEST(std::fabs(ge.loss_sum - seq_eval.loss_sum) <= kTolerance * std::fabs(seq_eval.loss_sum),
                 "eval loss sum " << ge.loss_sum << " vs seq " << seq_eval.loss_sum);
      BOOST_TEST(ge.correct == seq_eval.correct);
      // evaluate_logits (cnn_mpi predict): evaluate's stats, bit for bit (the same launches), and the
      // logits that seq computes, to the tolerance.
      std::vector<float> gpu_logits(600 * 10);
      const cnn::BatchStats gl = gpu->evaluate_logits(50, 600, gpu_logits.data());
      BOOST_TEST(gl.count == ge.count);
      BOOST_TEST(gl.loss_sum == ge.loss_sum);
      BOOST_TEST(gl.correct == ge.correct);
      const double logits_error = relative_error(gpu_logits.data(), seq_logits.data(), gpu_logits.size());
      BOOST_TEST(logits_error <= kTolerance, "logits: relative error " << logits_error << " vs seq");

      gpu->compute_gradients(0, 500);
      gpu->apply_update(sgd, 1.0f / 500);
      CHECK_CLOSE_REL(gpu->download_params(), seq_updated, "params after one sgd step");

      // The phase timer saw the steps, and take_phase_times() starts over.
      const cnn::PhaseTimes times = gpu->take_phase_times();
      BOOST_TEST(times.get(cnn::Phase::kForward) > 0.0);
      BOOST_TEST(times.get(cnn::Phase::kBackward) > 0.0);
      BOOST_TEST(times.get(cnn::Phase::kUpdate) > 0.0);
      BOOST_TEST(gpu->take_phase_times().get(cnn::Phase::kForward) == 0.0);
    }
  }
}

// ---- 2. determinism -----------------------------------------------------------------------------

struct RunResult {
  std::vector<float> params, optimizer_state;
  std::vector<float> snapshot;  // download_all into pinned memory, queued right after the last step
  cnn::FlatSizes sizes;
  double loss_sum = 0.0;
  std::int64_t correct = 0;
};

RunResult train_20_steps(const cnn::SeedModel& m, const RandomData& data, cnn::OptimizerKind kind, bool graphs) {
  auto gpu = make_cuda(m, graphs, kind);
  gpu->bind_data(data.train, data.test);
  gpu->upload_params(initial_params(m, 9));
  gpu->begin_epoch(cnn::Sampler(3, data.train.count()).permutation(0));
  cnn::OptimizerSettings settings;
  settings.kind = kind;
  constexpr std::int64_t kBatch = 128;
  for (int step = 0; step < 20; ++step) {
    // The last batch is smaller, as an epoch's last batch may be: a second graph.
    const std::int64_t count = step == 19 ? 77 : kBatch;
    gpu->compute_gradients(step * kBatch, count);
    gpu->apply_update(settings, 1.0f / static_cast<float>(count));
  }
  RunResult result;
  // The asynchronous checkpoint's snapshot, with the steps still queued: download_all must order its
  // copies after them on the stream.
  result.sizes = gpu->flat_sizes();
  const std::unique_ptr<cnn::HostFloats> pinned = gpu->allocate_host_floats(result.sizes.total());
  gpu->download_all(pinned->data());
  result.snapshot.assign(pinned->data(), pinned->data() + pinned->size());
  const cnn::BatchStats stats = gpu->take_train_stats();
  result.loss_sum = stats.loss_sum;
  result.correct = stats.correct;
  result.params = gpu->download_params();
  result.optimizer_state = gpu->download_optimizer_state();
  return result;
}

BOOST_AUTO_TEST_CASE(identical_runs_give_identical_bits) {
  const cnn::SeedModel m = seed_model(64);
  const RandomData data = random_dataset(m, 20 * 128, 100, 77);
  for (auto kind : {cnn::OptimizerKind::kSgd, cnn::OptimizerKind::kMomentum}) {
    BOOST_TEST_CONTEXT("optimizer " << cnn::optimizer_name(kind)) {
      const RunResult a = train_20_steps(m, data, kind, true);
      const RunResult b = train_20_steps(m, data, kind, true);
      const RunResult eager = train_20_steps(m, data, kind, false);
      BOOST_TEST(bitwise_equal(a.params, b.params), "two graph runs differ");
      BOOST_TEST(bitwise_equal(a.params, eager.params), "graph and eager runs differ");
      BOOST_TEST(bitwise_equal(a.optimizer_state, b.optimizer_state));
      BOOST_TEST(bitwise_equal(a.optimizer_state, eager.optimizer_state));
      BOOST_TEST(std::memcmp(&a.loss_sum, &b.loss_sum, sizeof(double)) == 0);
      BOOST_TEST(std::memcmp(&a.loss_sum, &eager.loss_sum, sizeof(double)) == 0);
      BOOST_TEST(a.correct == b.correct);
      // And it trained: the parameters moved.
      BOOST_TEST(!bitwise_equal(a.params, initial_params(m, 9)));
      // The checkpoint's snapshot holds exactly the parameters, then the optimizer state (no state).
      BOOST_TEST(a.sizes.params == static_cast<std::int64_t>(a.params.size()));
      BOOST_TEST(a.sizes.optimizer_state == static_cast<std::int64_t>(a.optimizer_state.size()));
      BOOST_TEST(a.sizes.state == 0);
      std::vector<float> both = a.params;
      both.insert(both.end(), a.optimizer_state.begin(), a.optimizer_state.end());
      BOOST_TEST(bitwise_equal(a.snapshot, both), "download_all differs from download_params + download_optimizer_state");
    }
  }
}

// A one-rank listener that reduces early, so the backend runs its fc-first backward, and does nothing
// else: stream-ordered, so the overlapped step is captured as a graph like NCCL's. It writes down the
// ranges it is told about.
class FcFirstListener final : public cnn::GradientReadyListener {
 public:
  void gradients_ready(std::int64_t offset, std::int64_t count) override {
    calls += "R" + std::to_string(offset) + "+" + std::to_string(count) + " ";
  }
  void all_gradients_ready() override { calls += "E "; }
  bool reduces_early() const override { return true; }
  bool stream_ordered() const override { return true; }
  std::string calls;
};

// The fc-first backward (the fc rows' sweep and finalize, then the conv rows') sums every gradient in
// the order of the fused sweep, so the overlapped step gives the plain step's bits: graphs and eager,
// and batches that give the sweep one split or many.
BOOST_AUTO_TEST_CASE(fc_first_backward_gives_the_fused_bits) {
  for (int filters : {64, 256}) {
    const cnn::SeedModel m = seed_model(filters);
    const cnn::ParamLayout layout = m.layout();
    const RandomData data = random_dataset(m, 2500, 100, 31 + filters);
    const auto permutation = cnn::Sampler(4, data.train.count()).permutation(0);
    const std::int64_t fc_offset = layout.find("fc.weight").offset;
    for (bool graphs : {true, false}) {
      BOOST_TEST_CONTEXT("d=" << filters << ", graphs " << graphs) {
        auto gpu = make_cuda(m, graphs);
        gpu->bind_data(data.train, data.test);
        gpu->upload_params(initial_params(m, 5));
        gpu->begin_epoch(permutation);
        for (std::int64_t count : {std::int64_t{250}, std::int64_t{1000}, std::int64_t{17}}) {
          BOOST_TEST_CONTEXT("count=" << count) {
            gpu->compute_gradients(7, count);
            const std::vector<float> plain = download_grads(*gpu, layout.total());
            const cnn::BatchStats plain_stats = gpu->take_train_stats();
            FcFirstListener listener;
            for (int step = 0; step < 3; ++step) {  // eager, then (graphs) captured and replayed
              listener.calls.clear();
              gpu->compute_gradients_overlapped(7, count, listener);
              BOOST_TEST(bitwise_equal(download_grads(*gpu, layout.total()), plain), "step " << step);
              const cnn::BatchStats stats = gpu->take_train_stats();
              BOOST_TEST(std::memcmp(&stats.loss_sum, &plain_stats.loss_sum, sizeof(double)) == 0);
              BOOST_TEST(stats.correct == plain_stats.correct);
            }
            // Told in order: the fc gradients (the end of the buffer), then everything. A replayed graph
            // calls nothing, so only the calls of a queued step are checked.
            if (!graphs)
              BOOST_TEST(listener.calls == "R" + std::to_string(fc_offset) + "+" +
                                               std::to_string(layout.total() - fc_offset) + " E ");
          }
        }
        // The eager fc-first step measured the conv layer's backward, after the fc point.
        const std::vector<cnn::GradientReadyPoint> points = gpu->gradient_ready_points();
        BOOST_TEST(points.size() == 2u);
        BOOST_TEST(points.front().offset == fc_offset);
        BOOST_TEST(points.front().seconds_after > 0.0);
      }
    }
  }
}

// ---- 3. measurement -----------------------------------------------------------------------------

struct Setting {
  std::int64_t batch;
  int filters;
};
constexpr Setting kBenchmarkSettings[] = {{1000, 64}, {1000, 256}, {100, 64}, {100, 256}};

// Train steps only (compute_gradients + apply_update; one rank, so no allreduce), 60000 images per
// epoch, after one warm-up epoch; the median of 3 epochs. Run with
//   ./gpu_backend --run_test=measure_epoch_time
BOOST_AUTO_TEST_CASE(measure_epoch_time, *boost::unit_test::disabled() * boost::unit_test::label("measurement")) {
  constexpr std::int64_t kImages = 60000;
  const RandomData data = random_dataset(seed_model(64), kImages, 1000, 2024);
  // The forward column stays (always "fused": the unfused forward was retired), so that rows line up
  // with those of older trees in before/after runs (kernels/bench).
  std::printf("%-6s %-4s %-8s %-7s %10s %9s %10s  %s\n", "batch", "d", "forward", "graphs", "ms/epoch", "us/step",
              "train loss", "phases of the last epoch, ms (data/forward/backward/update)");
  for (const Setting setting : kBenchmarkSettings) {
    const cnn::SeedModel m = seed_model(setting.filters);
    for (bool graphs : {true, false}) {
      auto gpu = make_cuda(m, graphs);
      gpu->bind_data(data.train, data.test);
      gpu->upload_params(initial_params(m, 1));
      const cnn::Sampler sampler(11, kImages);
      cnn::OptimizerSettings sgd;
      std::vector<double> ms;
      double loss = 0.0;
      cnn::PhaseTimes phases;
      for (int epoch = 0; epoch < 4; ++epoch) {
        gpu->begin_epoch(sampler.permutation(epoch));
        gpu->synchronize();
        const auto start = std::chrono::steady_clock::now();
        for (std::int64_t first = 0; first < kImages; first += setting.batch) {
          const std::int64_t count = std::min(setting.batch, kImages - first);
          gpu->compute_gradients(first, count);
          gpu->apply_update(sgd, 1.0f / static_cast<float>(count));
        }
        gpu->synchronize();
        const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        const cnn::BatchStats stats = gpu->take_train_stats();
        phases = gpu->take_phase_times();
        loss = stats.loss_sum / static_cast<double>(stats.count);
        if (epoch > 0) ms.push_back(elapsed);
      }
      std::sort(ms.begin(), ms.end());
      const double median = ms[ms.size() / 2];
      std::printf("%-6lld %-4d %-8s %-7s %10.2f %9.1f %10.4f  %.2f/%.2f/%.2f/%.2f\n",
                  static_cast<long long>(setting.batch), setting.filters, "fused", graphs ? "on" : "off", median, 1000.0 * median / static_cast<double>(kImages / setting.batch), loss,
                  1e3 * phases.get(cnn::Phase::kData), 1e3 * phases.get(cnn::Phase::kForward),
                  1e3 * phases.get(cnn::Phase::kBackward), 1e3 * phases.get(cnn::Phase::kUpdate));
      std::fflush(stdout);
      BOOST_TEST(std::isfinite(loss));
    }
  }
}

// The price of fc-first on one GPU: ms per epoch of 60000 images, compute only (no update), the plain
// (fused) backward against the fc-first one, at the per-rank batches of issue 9's benchmark. Run with
//   ./gpu_backend --run_test=measure_fc_first
BOOST_AUTO_TEST_CASE(measure_fc_first, *boost::unit_test::disabled() * boost::unit_test::label("measurement")) {
  constexpr std::int64_t kImages = 60000;
  const RandomData data = random_dataset(seed_model(64), kImages, 100, 2024);
  std::printf("%-6s %-4s %12s %12s %12s\n", "batch", "d", "fused us", "fc-first us", "difference");
  for (const Setting setting : {Setting{1000, 64}, Setting{250, 64}, Setting{1000, 256}, Setting{500, 256},
                                Setting{250, 256}}) {
    const cnn::SeedModel m = seed_model(setting.filters);
    auto gpu = make_cuda(m, true);
    gpu->bind_data(data.train, data.test);
    gpu->upload_params(initial_params(m, 1));
    gpu->begin_epoch(cnn::Sampler(11, kImages).permutation(0));
    FcFirstListener listener;
    double us[2] = {0.0, 0.0};
    for (int round = 0; round < 4; ++round) {  // alternated; the first round warms up
      for (int form = 0; form < 2; ++form) {
        gpu->synchronize();
        const auto start = std::chrono::steady_clock::now();
        for (std::int64_t first = 0; first + setting.batch <= kImages; first += setting.batch) {
          if (form == 0) gpu->compute_gradients(first, setting.batch);
          else gpu->compute_gradients_overlapped(first, setting.batch, listener);
        }
        gpu->synchronize();
        const double elapsed = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
        if (round > 0) us[form] += elapsed / 3.0 / static_cast<double>(kImages / setting.batch);
      }
    }
    std::printf("%-6lld %-4d %12.1f %12.1f %+12.1f\n", static_cast<long long>(setting.batch), setting.filters, us[0],
                us[1], us[1] - us[0]);
    std::fflush(stdout);
    (void)gpu->take_train_stats();
  }
}

// A few eager steps per setting, for a kernel profiler:
//   ncu --print-summary per-kernel ./gpu_backend --run_test=profile_steps
BOOST_AUTO_TEST_CASE(profile_steps, *boost::unit_test::disabled() * boost::unit_test::label("measurement")) {
  constexpr std::int64_t kImages = 6000;
  const RandomData data = random_dataset(seed_model(64), kImages, 100, 99);
  for (const Setting setting : kBenchmarkSettings) {
    const cnn::SeedModel m = seed_model(setting.filters);
    auto gpu = make_cuda(m, false);
    gpu->bind_data(data.train, data.test);
    gpu->upload_params(initial_params(m, 1));
    gpu->begin_epoch(cnn::Sampler(1, kImages).permutation(0));
    cnn::OptimizerSettings sgd;
    for (int step = 0; step < 2; ++step) {
      gpu->compute_gradients(step * setting.batch, setting.batch);
      gpu->apply_update(sgd, 1.0f / static_cast<float>(setting.batch));
    }
    gpu->synchronize();
  }
}

}  // namespace
