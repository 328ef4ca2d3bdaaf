// The persistent seed kernel (kernels/ops/seed_persistent.hpp) through the cuda backend's
// train_chunk, on a real GPU:
//   1. one step against seq (DESIGN.md's 1e-5 on the loss and the gradient), at several filter
//      counts and batch sizes, odd ones included;
//   2. every optimizer against the ordinary step (compute_gradients + apply_update) over a few steps;
//   3. the same bits on a rerun and whatever the chunks' boundaries (a resume between chunks repeats
//      the uninterrupted run);
//   4. the stop word ends a chunk at the next step boundary; the test hook's NaN stops it before that
//      step's update, naming the poisoned element;
//   5. what it refuses (three channels, --augment, a network that is not the seed model), and the
//      default one-step loop it then falls back to;
//   6. (disabled unless named: --run_test=measure_persistent_epoch) ms per epoch against the ordinary
//      step, beside the FP32 floor.
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_persistent
#include "boost_test.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "cnn/augment.hpp"
#include "cnn/backend.hpp"
#include "cnn/cuda_backend.hpp"
#include "cnn/model.hpp"
#include "cnn/network.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/sampler.hpp"
#include "cnn/step_chunk.hpp"
#include "gpu_seed_fixtures.hpp"
#include "gpu_test_util.hpp"

namespace {

using namespace cnn::gpu_test;  // tests/gpu_test_util.hpp, gpu_seed_fixtures.hpp

struct RequireGpu {
  RequireGpu() { require_gpu(); }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

constexpr double kStepTolerance = 1e-5;    // DESIGN.md: one step against seq
constexpr double kTensorTolerance = 1e-4;  // one small tensor alone (the conv's 9 x F taps), as gpu_backend

// A chunk of `steps` steps of `batch` samples from `first`, all with `settings` (its lr), steps
// numbered from `global_step` + 1 for Adam.
cnn::StepChunk chunk_of(std::int64_t first, std::int64_t batch, std::int64_t steps, cnn::OptimizerSettings settings,
                        std::int64_t global_step = 0) {
  cnn::StepChunk chunk;
  chunk.first = first;
  chunk.batch = batch;
  chunk.stride = batch;
  chunk.grad_scale = 1.0f / static_cast<float>(batch);
  chunk.global_step = global_step;
  for (std::int64_t k = 0; k < steps; ++k) {
    settings.step = global_step + k + 1;
    settings.lr = 0.05f * (1.0f + 0.1f * static_cast<float>(k));  // a schedule: each step its own lr
    chunk.optimizer.push_back(settings);
  }
  return chunk;
}

struct Snapshot {
  std::vector<float> params, state, grads;
  cnn::BatchStats stats;
};

Snapshot snapshot(cnn::Backend& backend, std::int64_t total) {
  Snapshot s;
  s.grads = download_grads(backend, total);
  s.params = backend.download_params();
  s.state = backend.download_optimizer_state();
  s.stats = backend.take_train_stats();
  return s;
}

// A cuda backend for the seed model at `params`, in epoch 0 of `data`'s order.
std::unique_ptr<cnn::Backend> ready_backend(const cnn::SeedModel& m, const RandomData& data,
                                            const std::vector<float>& params, cnn::OptimizerKind optimizer) {
  auto gpu = make("cuda", m, optimizer);
  gpu->bind_data(data.train, data.test);
  gpu->upload_params(params);
  gpu->begin_epoch(cnn::Sampler(5, data.train.count()).permutation(0));
  return gpu;
}

// The chunk's steps as the trainer's one-step loop runs them on the ordinary path (graphs, the deferred
// check that gates the update).
void ordinary_steps(cnn::Backend& gpu, const cnn::StepChunk& chunk) {
  for (std::int64_t k = 0; k < chunk.steps(); ++k) {
    gpu.compute_gradients(chunk.first + k * chunk.stride, chunk.batch);
    gpu.enqueue_nonfinite_check();
    gpu.apply_update(chunk.optimizer[static_cast<std::size_t>(k)], chunk.grad_scale);
  }
  gpu.synchronize();
}

BOOST_AUTO_TEST_CASE(one_step_matches_seq) {
  for (int filters : {8, 64, 256})
    for (std::int64_t batch : {37, 100, 256, 257, 1000}) {
      BOOST_TEST_CONTEXT("d=" << filters << " batch=" << batch) {
        const cnn::SeedModel m = seed_model(filters);
        const cnn::ParamLayout layout = m.layout();
        const RandomData data = random_dataset(m, 2200, 100, 7 + filters);
        const auto params = initial_params(m, 3);
        const cnn::StepChunk chunk = chunk_of(150, batch, 1, cnn::OptimizerSettings{});

        auto seq = make("seq", m);
        seq->bind_data(data.train, data.test);
        seq->upload_params(params);
        seq->begin_epoch(cnn::Sampler(5, data.train.count()).permutation(0));
        seq->compute_gradients(chunk.first, batch);
        const std::vector<float> want_grads(seq->grads(), seq->grads() + layout.total());
        const cnn::BatchStats want_stats = seq->take_train_stats();
        seq->apply_update(chunk.optimizer[0], chunk.grad_scale);
        const std::vector<float> want_params = seq->download_params();

        auto ordinary = ready_backend(m, data, params, cnn::OptimizerKind::kSgd);
        ordinary->compute_gradients(chunk.first, batch);
        const std::vector<float> ordinary_grads = download_grads(*ordinary, layout.total());

        auto gpu = ready_backend(m, data, params, cnn::OptimizerKind::kSgd);
        BOOST_REQUIRE_EQUAL(gpu->persistent_steps_unsupported(batch), "");
        const cnn::StepChunkResult result = gpu->train_chunk(chunk);
        BOOST_TEST(result.steps_done == 1);
        BOOST_TEST(result.nonfinite_index == -1);
        BOOST_TEST(!result.stop_seen);
        BOOST_TEST(result.times.size() == 1u);
        const Snapshot got = snapshot(*gpu, layout.total());
        const double grad_error = relative_error(got.grads, want_grads);
        BOOST_TEST(grad_error <= kStepTolerance, "gradient: relative error " << grad_error << " vs seq");
        // Per tensor, gpu_backend's rule: within kTensorTolerance of seq, or at least as close to the
        // float64 gradient as seq is; or within kStepTolerance of the ordinary cuda step. That last
        // clause is for a near-tie in a max-pool cell: the GPU's conv outputs (fmaf, the twins' order)
        // can round a hair apart from seq's and pick the other winner, and that one term moves a
        // filter's 9 taps by up to 5e-4 relative (seen at d=64, batch 256: elements 181-188 of
        // conv1.weight, persistent and ordinary cuda agreeing to 1e-6, seq with float64). The
        // ordinary step is held to seq by gpu_backend, so agreeing with it is the GPU's contract.
        double exact_loss = 0.0;
        const std::vector<double> exact = float64_gradients(m, params, data.train,
                                                            cnn::Sampler(5, data.train.count()).permutation(0),
                                                            chunk.first, batch, exact_loss);
        for (const cnn::ParamView& view : layout.views()) {
          const auto at = static_cast<std::size_t>(view.offset);
          const auto size = static_cast<std::size_t>(view.size);
          const double vs_seq = relative_error(got.grads.data() + at, want_grads.data() + at, size);
          const double mine_exact = relative_error64(got.grads.data() + at, exact.data() + at, size);
          const double seq_exact = relative_error64(want_grads.data() + at, exact.data() + at, size);
          BOOST_TEST_MESSAGE("d=" << filters << " batch=" << batch << " " << view.name() << ": vs seq " << vs_seq
                                  << "; vs float64: persistent " << mine_exact << ", seq " << seq_exact);
          if (!(vs_seq <= kTensorTolerance || mine_exact <= seq_exact)) {
            // Where it is off: the largest differences from float64, by element.
            std::vector<std::size_t> order(size);
            for (std::size_t i = 0; i < size; ++i) order[i] = i;
            const auto gap = [&](std::size_t i) { return std::fabs(got.grads[at + i] - exact[at + i]); };
            std::partial_sort(order.begin(), order.begin() + std::min<std::size_t>(6, size), order.end(),
                              [&](std::size_t x, std::size_t y) { return gap(x) > gap(y); });
            for (std::size_t r = 0; r < std::min<std::size_t>(6, size); ++r)
              BOOST_TEST_MESSAGE("  element " << order[r] << ": persistent " << got.grads[at + order[r]] << ", seq "
                                              << want_grads[at + order[r]] << ", float64 " << exact[at + order[r]]
                                              << ", ordinary cuda " << ordinary_grads[at + order[r]]);
          }
          const double vs_ordinary = relative_error(got.grads.data() + at, ordinary_grads.data() + at, size);
          BOOST_TEST((vs_seq <= kTensorTolerance || mine_exact <= seq_exact || vs_ordinary <= kStepTolerance),
                     view.name() << ": relative error " << vs_seq << " vs seq, " << vs_ordinary
                                 << " vs the ordinary step; vs float64 persistent " << mine_exact << ", seq "
                                 << seq_exact);
        }
        CHECK_REL(got.params, want_params, kStepTolerance, "params after the update");
        BOOST_TEST(got.stats.count == batch);
        BOOST_TEST(got.stats.correct == want_stats.correct);
        BOOST_TEST(std::fabs(got.stats.loss_sum - want_stats.loss_sum) <= kStepTolerance * std::fabs(want_stats.loss_sum),
                   "loss sum " << got.stats.loss_sum << " vs seq " << want_stats.loss_sum);
      }
    }
}

BOOST_AUTO_TEST_CASE(every_optimizer_matches_the_ordinary_step) {
  const cnn::SeedModel m = seed_model(32);
  const cnn::ParamLayout layout = m.layout();
  const RandomData data = random_dataset(m, 1000, 100, 11);
  const auto params = initial_params(m, 4);
  cnn::OptimizerSettings momentum;
  momentum.kind = cnn::OptimizerKind::kMomentum;
  momentum.nesterov = true;
  momentum.weight_decay = 5e-4f;
  cnn::OptimizerSettings adam;
  adam.kind = cnn::OptimizerKind::kAdam;
  adam.weight_decay = 1e-4f;
  cnn::OptimizerSettings adamw = adam;
  adamw.kind = cnn::OptimizerKind::kAdamW;
  cnn::OptimizerSettings sgd;
  sgd.weight_decay = 1e-3f;
  for (const cnn::OptimizerSettings& settings : {sgd, momentum, adam, adamw}) {
    BOOST_TEST_CONTEXT(cnn::optimizer_name(settings.kind)) {
      const cnn::StepChunk chunk = chunk_of(0, 128, 4, settings, 10);
      auto ordinary = ready_backend(m, data, params, settings.kind);
      ordinary_steps(*ordinary, chunk);
      const Snapshot want = snapshot(*ordinary, layout.total());
      auto persistent = ready_backend(m, data, params, settings.kind);
      BOOST_TEST(persistent->train_chunk(chunk).steps_done == 4);
      const Snapshot got = snapshot(*persistent, layout.total());
      CHECK_REL(got.params, want.params, kStepTolerance, "params after 4 steps");
      CHECK_REL(got.state, want.state, kTensorTolerance, "optimizer state after 4 steps");
      BOOST_TEST(got.stats.count == want.stats.count);
      BOOST_TEST(std::fabs(got.stats.loss_sum - want.stats.loss_sum) <= kStepTolerance * std::fabs(want.stats.loss_sum));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_same_bits_on_a_rerun_and_at_any_chunk_boundary) {
  const cnn::SeedModel m = seed_model(64);
  const cnn::ParamLayout layout = m.layout();
  const RandomData data = random_dataset(m, 1500, 100, 21);
  const auto params = initial_params(m, 5);
  cnn::OptimizerSettings momentum;
  momentum.kind = cnn::OptimizerKind::kMomentum;
  const cnn::StepChunk whole = chunk_of(0, 100, 12, momentum);
  const auto run = [&](const std::vector<std::int64_t>& pieces) {
    auto gpu = ready_backend(m, data, params, momentum.kind);
    std::int64_t done = 0;
    for (std::int64_t piece : pieces) {
      cnn::StepChunk part = whole;
      part.first = whole.first + done * whole.stride;
      part.global_step = done;
      part.optimizer.assign(whole.optimizer.begin() + done, whole.optimizer.begin() + done + piece);
      BOOST_TEST(gpu->train_chunk(part).steps_done == piece);
      done += piece;
    }
    return snapshot(*gpu, layout.total());
  };
  const Snapshot one = run({12});
  const Snapshot again = run({12});
  const Snapshot split = run({5, 7});
  const Snapshot single = run({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  for (const auto& [other, what] : {std::pair{&again, "a rerun"}, std::pair{&split, "chunks of 5 and 7"},
                                    std::pair{&single, "chunks of one step"}}) {
    BOOST_TEST(bitwise_equal(one.params, other->params), what << ": params differ");
    BOOST_TEST(bitwise_equal(one.state, other->state), what << ": optimizer state differs");
    BOOST_TEST(bitwise_equal(one.grads, other->grads), what << ": the last gradient differs");
    BOOST_TEST(one.stats.loss_sum == other->stats.loss_sum, what << ": loss sums differ");
  }
  // And the chunk did train: 12 steps moved the parameters.
  BOOST_TEST(!bitwise_equal(one.params, params));
}

BOOST_AUTO_TEST_CASE(the_stop_word_and_a_nonfinite_gradient_end_a_chunk_at_a_step_boundary) {
  const cnn::SeedModel m = seed_model(32);
  const cnn::ParamLayout layout = m.layout();
  const RandomData data = random_dataset(m, 1200, 100, 31);
  const auto params = initial_params(m, 6);
  const cnn::StepChunk ten = chunk_of(0, 100, 10, cnn::OptimizerSettings{});
  const auto first_steps = [&](std::int64_t steps) {
    cnn::StepChunk part = ten;
    part.optimizer.resize(static_cast<std::size_t>(steps));
    auto gpu = ready_backend(m, data, params, cnn::OptimizerKind::kSgd);
    BOOST_TEST(gpu->train_chunk(part).steps_done == steps);
    return gpu->download_params();
  };

  {  // A stop word set before the chunk: it polls at step 0's end, so that step completes, no other.
    auto gpu = ready_backend(m, data, params, cnn::OptimizerKind::kSgd);
    volatile int* word = gpu->chunk_stop_word();
    BOOST_REQUIRE(word != nullptr);
    *word = 10;  // SIGUSR1's number, as the handler stores it
    const cnn::StepChunkResult result = gpu->train_chunk(ten);
    *word = 0;
    BOOST_TEST(result.stop_seen);
    BOOST_TEST(result.steps_done == 1);
    BOOST_TEST(result.nonfinite_index == -1);
    BOOST_TEST(bitwise_equal(gpu->download_params(), first_steps(1)), "a stopped chunk's parameters");
    BOOST_TEST(gpu->take_train_stats().count == 100);
    // The word cleared, the next chunk runs whole.
    cnn::StepChunk rest = ten;
    rest.first = 100;
    rest.optimizer.resize(9);
    BOOST_TEST(gpu->train_chunk(rest).steps_done == 9);
  }
  {  // The test hook's NaN in step 3: steps 0-2 are applied, step 3 is not, and the index names the
     // layout's last element (the fc bias).
    auto gpu = ready_backend(m, data, params, cnn::OptimizerKind::kSgd);
    cnn::StepChunk poisoned = ten;
    poisoned.nan_at = 3;
    const cnn::StepChunkResult result = gpu->train_chunk(poisoned);
    BOOST_TEST(result.steps_done == 3);
    BOOST_TEST(result.nonfinite_index == layout.total() - 1);
    BOOST_TEST(result.times.size() == 4u);
    BOOST_TEST(bitwise_equal(gpu->download_params(), first_steps(3)), "parameters after the refused step");
    BOOST_TEST(std::isnan(download_grads(*gpu, layout.total()).back()));
  }
}

BOOST_AUTO_TEST_CASE(what_it_refuses_runs_one_step_per_launch) {
  const RandomData rgb_data = random_dataset(seed_model(16, 3, 32), 600, 100, 41);
  const cnn::SeedModel rgb = seed_model(16, 3, 32);
  auto gpu = ready_backend(rgb, rgb_data, initial_params(rgb, 7), cnn::OptimizerKind::kSgd);
  BOOST_TEST(gpu->persistent_steps_unsupported(100).find("one input channel") != std::string::npos,
             gpu->persistent_steps_unsupported(100));
  // The default loop: the ordinary step's bits.
  const cnn::StepChunk chunk = chunk_of(0, 100, 3, cnn::OptimizerSettings{});
  BOOST_TEST(gpu->train_chunk(chunk).steps_done == 3);
  auto ordinary = ready_backend(rgb, rgb_data, initial_params(rgb, 7), cnn::OptimizerKind::kSgd);
  ordinary_steps(*ordinary, chunk);
  BOOST_TEST(bitwise_equal(gpu->download_params(), ordinary->download_params()));

  const cnn::SeedModel m = seed_model(32);
  auto plain = make("cuda", m);
  BOOST_TEST(plain->persistent_steps_unsupported(100) == "");
  BOOST_TEST(plain->persistent_steps_unsupported(20000).find("8192") != std::string::npos);
  cnn::BackendOptions augmented;
  augmented.kind = cnn::BackendKind::kCuda;
  augmented.augment = cnn::parse_augment("crop:2");
  BOOST_TEST(cnn::make_cuda_backend(augmented, cnn::seed_network(m))->persistent_steps_unsupported(100).find("--augment") !=
             std::string::npos);
  cnn::BackendOptions cuda;
  cuda.kind = cnn::BackendKind::kCuda;
  const cnn::Network cifar = cnn::build_network("cifar", 32, m.input, 10);
  BOOST_TEST(cnn::make_cuda_backend(cuda, cifar)->persistent_steps_unsupported(100).find("seed model") !=
             std::string::npos);
}

// ms per epoch of 60000 random images, the ordinary step (graphs, the deferred check, the update)
// against the persistent kernel (a whole epoch per launch, the stop word polled and the check on at
// every step), alternated, median of 3 epochs after a warm-up; beside the FP32 floor (the model's
// FLOPs at 67 TFLOP/s, the H100 SXM's and H200's FP32 peak). Run with
//   ./gpu_persistent --run_test=measure_persistent_epoch
BOOST_AUTO_TEST_CASE(measure_persistent_epoch, *boost::unit_test::disabled() * boost::unit_test::label("measurement")) {
  constexpr std::int64_t kImages = 60000;
  constexpr double kFp32Peak = 67e12;
  struct Setting {
    std::int64_t batch;
    int filters;
  };
  std::printf("%-6s %-4s %7s %12s %12s %10s %10s %9s %9s  %s\n", "batch", "d", "images", "ordinary ms", "persist. ms",
              "speed-up", "floor ms", "of floor", "us/step", "persistent phases per step, us (forward/backward/update)");
  // Batches 10 and 1: what a step costs whatever its work (barriers, latencies), over 6000 steps.
  for (const Setting setting : {Setting{1000, 64}, Setting{1000, 256}, Setting{100, 64}, Setting{100, 256},
                                Setting{10, 64}, Setting{1, 64}}) {
    const cnn::SeedModel m = seed_model(setting.filters);
    const std::int64_t images = std::min<std::int64_t>(kImages, setting.batch * 6000);
    const RandomData data = random_dataset(m, images, 100, 2024);
    const auto params = initial_params(m, 1);
    const cnn::Sampler sampler(11, images);
    const std::int64_t steps = images / setting.batch;
    std::vector<double> ms[2];
    cnn::ChunkStepTimes phases;
    for (int path = 0; path < 2; ++path) {
      auto gpu = make("cuda", m);
      gpu->bind_data(data.train, data.test);
      gpu->upload_params(params);
      for (int epoch = 0; epoch < 4; ++epoch) {
        gpu->begin_epoch(sampler.permutation(epoch));
        const cnn::StepChunk chunk = chunk_of(0, setting.batch, steps, cnn::OptimizerSettings{}, epoch * steps);
        gpu->synchronize();
        const auto start = std::chrono::steady_clock::now();
        if (path == 0) {
          ordinary_steps(*gpu, chunk);
        } else {
          const cnn::StepChunkResult result = gpu->train_chunk(chunk);
          BOOST_TEST(result.steps_done == steps);
          phases = cnn::ChunkStepTimes{};
          for (const cnn::ChunkStepTimes& t : result.times) {
            phases.forward += t.forward / static_cast<double>(steps);
            phases.backward += t.backward / static_cast<double>(steps);
            phases.update += t.update / static_cast<double>(steps);
          }
        }
        gpu->synchronize();
        if (epoch > 0)
          ms[path].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        (void)gpu->take_train_stats();
      }
      std::sort(ms[path].begin(), ms[path].end());
    }
    const double ordinary = ms[0][1], persistent = ms[1][1];
    const double floor_ms = m.flops_per_image() * static_cast<double>(images) / kFp32Peak * 1e3;
    std::printf("%-6lld %-4d %7lld %12.2f %12.2f %9.2fx %10.2f %8.1f%% %9.2f  %.1f/%.1f/%.1f\n",
                static_cast<long long>(setting.batch), setting.filters, static_cast<long long>(images), ordinary,
                persistent, ordinary / persistent, floor_ms, 100.0 * floor_ms / persistent,
                1e3 * persistent / static_cast<double>(steps), 1e6 * phases.forward, 1e6 * phases.backward,
                1e6 * phases.update);
    std::fflush(stdout);
  }
}

// A few chunks per setting, for a kernel profiler:
//   ncu --set full ./gpu_persistent --run_test=profile_persistent
BOOST_AUTO_TEST_CASE(profile_persistent, *boost::unit_test::disabled() * boost::unit_test::label("measurement")) {
  struct Setting {
    std::int64_t batch;
    int filters;
    std::int64_t steps;
  };
  for (const Setting setting : {Setting{100, 64, 30}, Setting{1000, 64, 6}, Setting{1000, 256, 3}}) {
    const cnn::SeedModel m = seed_model(setting.filters);
    const RandomData data = random_dataset(m, 6000, 100, 99);
    auto gpu = ready_backend(m, data, initial_params(m, 1), cnn::OptimizerKind::kSgd);
    BOOST_TEST(gpu->train_chunk(chunk_of(0, setting.batch, setting.steps, cnn::OptimizerSettings{})).steps_done ==
               setting.steps);
  }
}

}  // namespace
