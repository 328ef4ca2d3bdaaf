// --steps-per-launch auto's measurement (step_path_advisor.hpp) on the CPU, where no backend runs the
// persistent kernel: a backend that forwards every call to a real `seq` backend but says it runs the
// kernel, and makes a chunk's steps cost more or less than the one-step loop's, on a clock it advances
// itself (exact times, so exact settings lines) or with real sleeps on the wall clock. Checked:
//   - the faster path is taken, both ways, and the settings line gives both measured times;
//   - K (the steps each path runs per timing) from one step's time, at least 2, at most the whole
//     steps left in the epoch; both paths start at the run's resume position;
//   - nothing leaks: parameters, optimizer state and bn's running statistics bitwise as before, no
//     train stats or phase times left, the next step bitwise that of an untouched backend;
//   - the NaN test hook is never handed to a chunk; a set stop word cuts the timing short, measures
//     nothing and stays set; too few whole steps left measure nothing.
#define BOOST_TEST_MODULE step_path_advisor
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include "boost_test.hpp"
#include "cnn/sampler.hpp"
#include "cnn/step_path_advisor.hpp"
#include "cnn/train_step.hpp"
#include "test_util.hpp"

using namespace cnn;

namespace {

struct MpiFixture {
  MpiFixture() {
    world = std::make_unique<MpiWorld>(&boost::unit_test::framework::master_test_suite().argc,
                                       &boost::unit_test::framework::master_test_suite().argv);
  }
  ~MpiFixture() { world.reset(); }
  static std::unique_ptr<MpiWorld> world;
};
std::unique_ptr<MpiWorld> MpiFixture::world;

// A `seq` backend that claims the persistent kernel. Its chunk is Backend::train_chunk's default loop
// through the calls below; each step computed costs `loop_cost` (outside a chunk) or `chunk_cost`
// (inside one) on `now`, the test's clock, and sleeps `loop_sleep` or `chunk_sleep` of real time.
// (Backend::set_step_randomness is not virtual: the inner backend keeps its default randomness, so the
// models here have no dropout.)
class KernelClaimingBackend : public Backend {
 public:
  explicit KernelClaimingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  double now = 0.0;
  double loop_cost = 0.0, chunk_cost = 0.0;
  std::chrono::milliseconds loop_sleep{0}, chunk_sleep{0};
  std::vector<std::int64_t> loop_firsts;    // compute_gradients' first sample, outside chunks
  std::vector<StepChunk> chunks;            // every chunk handed over

  std::string persistent_steps_unsupported(std::int64_t) const override { return ""; }
  StepChunkResult train_chunk(const StepChunk& chunk) override {
    chunks.push_back(chunk);
    in_chunk_ = true;
    const StepChunkResult result = Backend::train_chunk(chunk);
    in_chunk_ = false;
    return result;
  }
  void compute_gradients(std::int64_t first, std::int64_t count) override {
    inner_->compute_gradients(first, count);
    if (!in_chunk_) loop_firsts.push_back(first);
    now += in_chunk_ ? chunk_cost : loop_cost;
    std::this_thread::sleep_for(in_chunk_ ? chunk_sleep : loop_sleep);
  }

  std::string name() const override { return "kernel-claiming " + inner_->name(); }
  std::string device_description() const override { return inner_->device_description(); }
  MemorySpace memory_space() const override { return inner_->memory_space(); }
  void bind_data(const Dataset& train, const Dataset& test) override { inner_->bind_data(train, test); }
  void upload_params(const std::vector<float>& host) override { inner_->upload_params(host); }
  std::vector<float> download_params() override { return inner_->download_params(); }
  void upload_optimizer_state(const std::vector<float>& host) override { inner_->upload_optimizer_state(host); }
  std::vector<float> download_optimizer_state() override { return inner_->download_optimizer_state(); }
  void upload_state(const std::vector<float>& host) override { inner_->upload_state(host); }
  std::vector<float> download_state() override { return inner_->download_state(); }
  FlatSizes flat_sizes() const override { return inner_->flat_sizes(); }
  void download_all(float* out) override { inner_->download_all(out); }
  float* params() override { return inner_->params(); }
  float* grads() override { return inner_->grads(); }
  void begin_epoch(const std::vector<std::int32_t>& permutation) override { inner_->begin_epoch(permutation); }
  std::int64_t first_nonfinite_grad() override { return inner_->first_nonfinite_grad(); }
  void set_grad_for_test(std::int64_t index, float value) override { inner_->set_grad_for_test(index, value); }
  void apply_update(const OptimizerSettings& settings, float grad_scale) override {
    inner_->apply_update(settings, grad_scale);
  }
  BatchStats take_train_stats() override { return inner_->take_train_stats(); }
  BatchStats evaluate(std::int64_t first, std::int64_t count) override { return inner_->evaluate(first, count); }
  BatchStats evaluate_logits(std::int64_t first, std::int64_t count, float* logits) override {
    return inner_->evaluate_logits(first, count, logits);
  }
  void synchronize() override { inner_->synchronize(); }
  PhaseTimes take_phase_times() override { return inner_->take_phase_times(); }

 private:
  std::unique_ptr<Backend> inner_;
  bool in_chunk_ = false;
};

constexpr std::int64_t kSamples = 400;
constexpr std::int64_t kBatch = 10;  // 40 whole steps an epoch
constexpr std::int64_t kStepsPerEpoch = kSamples / kBatch;

// bn's running statistics are the backend's state; momentum's velocity its optimizer state.
Network small_network() { return build_network("conv3x3:4/p1 bn relu maxpool2 fc:10", 4, TensorShape{1, 12, 12}, 10); }

std::unique_ptr<Backend> seq_backend(const Network& network) {
  BackendOptions options;
  options.kind = BackendKind::kSeq;
  options.optimizer = OptimizerKind::kMomentum;
  return make_backend(options, network);
}

// A run some steps in: its backend bound to epoch 1's order, with parameters, velocity and bn
// statistics from `warm_steps` steps (so that a leak of any of them would show).
struct Fixture {
  Network network = small_network();
  Dataset data = test::random_dataset(kSamples, TensorShape{1, 12, 12}, 3);
  LearningRate lr{0.05, LrSchedule{}, 4, kStepsPerEpoch, 3 * kStepsPerEpoch};  // warm-up: a new lr each step
  SingleRankCommunicator comm{MemorySpace::kHost};
  std::unique_ptr<KernelClaimingBackend> backend;

  explicit Fixture(std::int64_t warm_steps = 3) {
    backend = std::make_unique<KernelClaimingBackend>(prepared(warm_steps));
  }
  // A seq backend in the state the run's backend starts the measurement in.
  std::unique_ptr<Backend> prepared(std::int64_t warm_steps) const {
    std::unique_ptr<Backend> b = seq_backend(network);
    b->bind_data(data, data);
    std::vector<float> params(static_cast<std::size_t>(network.layout.total()));
    initialize_params(params.data(), network.layout, 5);
    b->upload_params(params);
    b->begin_epoch(Sampler(9, kSamples).permutation(0));
    SingleRankCommunicator single(MemorySpace::kHost);
    PhaseTimes times;
    for (std::int64_t s = 0; s < warm_steps; ++s)
      train_step(*b, single, settings(s), network.layout.total(), global_batch_range(s, kSamples, kBatch), times);
    b->begin_epoch(Sampler(9, kSamples).permutation(1));
    (void)b->take_train_stats();
    (void)b->take_phase_times();
    return b;
  }
  OptimizerSettings settings(std::int64_t global_step) const {
    OptimizerSettings o;
    o.kind = OptimizerKind::kMomentum;
    o.step = global_step + 1;
    o.lr = lr.at_float(global_step);
    return o;
  }

  StepPathRun run(std::int64_t step_in_epoch) {
    StepPathRun r;
    r.world = MpiFixture::world.get();
    r.backend = backend.get();
    r.comm = &comm;
    r.optimizer = settings(0);
    r.learning_rate = &lr;
    r.seed = 9;
    r.param_count = network.layout.total();
    r.train_count = kSamples;
    r.batch = kBatch;
    r.step_in_epoch = step_in_epoch;
    r.global_step = kStepsPerEpoch + step_in_epoch;
    return r;
  }
  StepPathMeasurement measure_on_own_clock(std::int64_t step_in_epoch) {
    return measure_step_paths(run(step_in_epoch), [this] { return backend->now; });
  }
};

std::string settings_line(const StepPathMeasurement& m) {
  ChunkConditions c;
  c.steps_per_launch = 0;  // auto
  c.steps_per_epoch = kStepsPerEpoch;
  c.measured = m;
  return plan_chunks(c).describe;
}

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

BOOST_AUTO_TEST_CASE(the_chunk_where_its_steps_measure_faster) {
  Fixture f;
  f.backend->loop_cost = 0.000134;
  f.backend->chunk_cost = 0.000130;
  const StepPathMeasurement m = f.measure_on_own_clock(10);
  BOOST_TEST(m.skipped == "");
  BOOST_TEST(m.chunk_seconds == 0.000130, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(m.loop_seconds == 0.000134, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(settings_line(m) == "up to 40 (persistent kernel: 0.130 ms a step, one launch per step 0.134 ms, measured)");
  // K: 5 ms of 0.134 ms steps is 38, more than the 30 whole steps left from step 10: all of them.
  BOOST_TEST_REQUIRE(f.backend->chunks.size() == 1U + kStepPathRepeats);  // a warm-up, then the timed ones
  for (const StepChunk& chunk : f.backend->chunks) {
    BOOST_TEST(chunk.steps() == 30);
    BOOST_TEST(chunk.first == 10 * kBatch);  // the resume position
    BOOST_TEST(chunk.stride == kBatch);
    BOOST_TEST(chunk.global_step == kStepsPerEpoch + 10);
    BOOST_TEST(chunk.nan_at == -1);  // the NaN test hook never
  }
  // The loop: a warm-up step and one to size K, then K steps per repeat, each from the resume position.
  BOOST_TEST(f.backend->loop_firsts.size() == 2U + kStepPathRepeats * 30U);
  BOOST_TEST(f.backend->loop_firsts.front() == 10 * kBatch);
  BOOST_TEST(f.backend->loop_firsts[2] == 10 * kBatch);
  BOOST_TEST(f.backend->loop_firsts.back() == 39 * kBatch);
}

BOOST_AUTO_TEST_CASE(the_one_step_loop_where_its_steps_measure_faster) {
  Fixture f;
  f.backend->loop_cost = 0.000080;
  f.backend->chunk_cost = 0.000084;
  const StepPathMeasurement m = f.measure_on_own_clock(0);
  BOOST_TEST(m.skipped == "");
  BOOST_TEST(settings_line(m) ==
             "1 (auto: one launch per step measured faster: 0.080 ms a step, the persistent kernel 0.084 ms)");
  // K: 5 ms of 0.08 ms steps is 63, more than the epoch's 40 whole steps.
  BOOST_TEST(f.backend->chunks.front().steps() == 40);
  // Slower steps take fewer of them: 5 ms of 1.2 ms steps is 5.
  Fixture slow;
  slow.backend->loop_cost = 0.0012;
  slow.backend->chunk_cost = 0.0011;
  BOOST_TEST(settings_line(slow.measure_on_own_clock(0)) ==
             "up to 40 (persistent kernel: 1.100 ms a step, one launch per step 1.200 ms, measured)");
  BOOST_TEST(slow.backend->chunks.front().steps() == 5);
  // Very slow steps still take 2.
  Fixture slowest;
  slowest.backend->loop_cost = 0.5;
  slowest.backend->chunk_cost = 0.4;
  (void)slowest.measure_on_own_clock(0);
  BOOST_TEST(slowest.backend->chunks.front().steps() == 2);
}

BOOST_AUTO_TEST_CASE(the_faster_path_on_the_wall_clock) {
  // Real sleeps of 3 ms a step on one path against steps of well under 1 ms on the other.
  Fixture chunk_slow;
  chunk_slow.backend->chunk_sleep = std::chrono::milliseconds(3);
  const StepPathMeasurement a = measure_step_paths(chunk_slow.run(30));
  BOOST_TEST(a.skipped == "");
  BOOST_TEST(a.loop_seconds < a.chunk_seconds);
  BOOST_TEST(a.chunk_seconds >= 0.003);
  BOOST_TEST(settings_line(a).rfind("1 (auto: one launch per step measured faster: ", 0) == 0, settings_line(a));
  Fixture loop_slow;
  loop_slow.backend->loop_sleep = std::chrono::milliseconds(3);
  const StepPathMeasurement b = measure_step_paths(loop_slow.run(30));
  BOOST_TEST(b.chunk_seconds < b.loop_seconds);
  BOOST_TEST(b.loop_seconds >= 0.003);
  BOOST_TEST(settings_line(b).rfind("up to 40 (persistent kernel: ", 0) == 0, settings_line(b));
}

BOOST_AUTO_TEST_CASE(nothing_of_the_measurement_reaches_the_run) {
  Fixture f;
  f.backend->loop_cost = 0.0001;
  f.backend->chunk_cost = 0.0002;
  const std::vector<float> params = f.backend->download_params();
  const std::vector<float> velocity = f.backend->download_optimizer_state();
  const std::vector<float> bn_running = f.backend->download_state();
  BOOST_TEST_REQUIRE(!velocity.empty());
  BOOST_TEST_REQUIRE(!bn_running.empty());
  (void)f.measure_on_own_clock(5);
  BOOST_TEST((f.backend->download_params() == params));
  BOOST_TEST((f.backend->download_optimizer_state() == velocity));
  BOOST_TEST((f.backend->download_state() == bn_running));
  const BatchStats stats = f.backend->take_train_stats();
  BOOST_TEST(stats.count == 0);
  BOOST_TEST(stats.correct == 0);
  BOOST_TEST(stats.loss_sum == 0.0);
  const PhaseTimes phases = f.backend->take_phase_times();
  for (double seconds : phases.seconds) BOOST_TEST(seconds == 0.0);
  // The run's next step gives the very bits of a backend that was never measured on.
  const std::unique_ptr<Backend> untouched = f.prepared(3);
  PhaseTimes times;
  const Range batch = global_batch_range(5, kSamples, kBatch);
  for (Backend* b : {static_cast<Backend*>(f.backend.get()), untouched.get()})
    train_step(*b, f.comm, f.settings(kStepsPerEpoch + 5), f.network.layout.total(), batch, times);
  BOOST_TEST((f.backend->download_params() == untouched->download_params()));
  BOOST_TEST((f.backend->download_optimizer_state() == untouched->download_optimizer_state()));
  BOOST_TEST((f.backend->download_state() == untouched->download_state()));
  const BatchStats a = f.backend->take_train_stats();
  const BatchStats b = untouched->take_train_stats();
  BOOST_TEST(a.loss_sum == b.loss_sum);
  BOOST_TEST(a.correct == b.correct);
}

BOOST_AUTO_TEST_CASE(a_stop_word_set_cuts_it_short_and_stays_set) {
  Fixture f;
  const std::vector<float> params = f.backend->download_params();
  *f.backend->chunk_stop_word() = 15;  // SIGTERM, as the handler stores it
  const StepPathMeasurement m = f.measure_on_own_clock(0);
  BOOST_TEST(m.skipped == "a stop signal cut the timing of the persistent kernel short");
  BOOST_TEST(settings_line(m) == "1 (auto: a stop signal cut the timing of the persistent kernel short)");
  BOOST_TEST(*f.backend->chunk_stop_word() == 15);
  BOOST_TEST((f.backend->download_params() == params));
  BOOST_TEST(f.backend->take_train_stats().count == 0);
}

BOOST_AUTO_TEST_CASE(too_few_whole_steps_left_measure_nothing) {
  Fixture f;
  const std::vector<float> params = f.backend->download_params();
  const StepPathMeasurement m = f.measure_on_own_clock(kStepsPerEpoch - 1);
  BOOST_TEST(settings_line(m) ==
             "1 (auto: 1 whole step left in the epoch, too few to time the persistent kernel against one launch per step)");
  BOOST_TEST(f.backend->chunks.empty());
  BOOST_TEST(f.backend->loop_firsts.empty());
  BOOST_TEST((f.backend->download_params() == params));
}

BOOST_AUTO_TEST_CASE(train_stats_it_could_not_put_back_are_refused) {
  Fixture f(0);
  f.backend->compute_gradients(0, kBatch);
  BOOST_CHECK_THROW(f.measure_on_own_clock(0), std::logic_error);
}
