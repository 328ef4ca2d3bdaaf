// The overlapped step (gradient_overlap.hpp) against the plain one, under mpiexec -n 2 and -n 4:
// 20 steps with the allreduce overlapped (MPI_Iallreduce of each finished layer's bucket while the
// layers below run their backward, then the rest) end with parameters BITWISE equal to 20 plain steps
// on 2 ranks, where an elementwise sum of two values is the same in any order; on 4 ranks MPI may sum
// a sub-range in another order than the whole buffer, so there they agree to 1e-6. The call order
// proves the overlap happened: each early bucket's allreduce is started as its layer finishes, MPI is
// polled during the backward below it, and only then the last bucket is started and waited for.
// The seed model (two layers with parameters), a small cifar (five) and a residual network (two blocks,
// each one bucket), on `seq` and `threads`.
#define BOOST_TEST_MODULE mpi_overlap_equivalence
#include <mpi.h>

#include <string>

#include "boost_test.hpp"
#include "cnn/gradient_overlap.hpp"
#include "cnn/sampler.hpp"
#include "cnn/train_step.hpp"
#include "test_util.hpp"

namespace {

struct MpiFixture {
  MpiFixture() { world = std::make_unique<cnn::MpiWorld>(&boost::unit_test::framework::master_test_suite().argc,
                                                         &boost::unit_test::framework::master_test_suite().argv); }
  ~MpiFixture() { world.reset(); }
  static std::unique_ptr<cnn::MpiWorld> world;
};
std::unique_ptr<cnn::MpiWorld> MpiFixture::world;

// MpiCommunicator that writes down, per step, what was called: S<offset> start, p progress, W wait.
class RecordingCommunicator : public cnn::MpiCommunicator {
 public:
  using cnn::MpiCommunicator::MpiCommunicator;
  void start_allreduce_sum(float* data, std::int64_t count) override {
    calls += "S" + std::to_string(data - base) + " ";
    cnn::MpiCommunicator::start_allreduce_sum(data, count);
  }
  void progress() override {
    if (calls.empty() || calls.back() != 'p') calls += "p";  // one p per run of polls
    cnn::MpiCommunicator::progress();
  }
  void wait_all() override {
    calls += " W|";
    cnn::MpiCommunicator::wait_all();
  }
  const float* base = nullptr;
  std::string calls;
};

struct Run {
  std::vector<float> params;
  std::string first_step_calls;
  std::size_t buckets = 0;
  std::vector<cnn::GradientReadyPoint> points;
};

cnn::Network seed_network() {
  cnn::SeedModel model;
  model.input = {1, 28, 28};
  model.filters = 8;
  return cnn::seed_network(model);
}

// cuts: the bucket plan (plan_with_cuts); < 0: the plain step.
Run train(const cnn::Network& net, const std::string& kind, cnn::OptimizerKind optimizer, int cuts) {
  static const cnn::Dataset grey = cnn::test::random_dataset(240, cnn::TensorShape{1, 28, 28}, 5);
  static const cnn::Dataset colour = cnn::test::random_dataset(240, cnn::TensorShape{3, 20, 20}, 6);
  const cnn::Dataset& data = net.input.channels == 3 ? colour : grey;
  const cnn::ParamLayout& layout = net.layout;
  cnn::BackendOptions options;
  options.kind = cnn::parse_backend_kind(kind);
  options.threads = 2;
  options.optimizer = optimizer;
  auto backend = cnn::make_backend(options, net);
  backend->bind_data(data, data);
  std::vector<float> params(static_cast<std::size_t>(layout.total()));
  cnn::initialize_params(params.data(), layout, 3);
  backend->upload_params(params);
  RecordingCommunicator comm(*MpiFixture::world);
  comm.base = backend->grads();
  std::unique_ptr<cnn::OverlapReducer> overlap;
  Run run;
  run.points = backend->gradient_ready_points();
  if (cuts >= 0) {
    overlap = std::make_unique<cnn::OverlapReducer>(comm, backend->grads(), layout.total());
    overlap->set_plan(cnn::plan_with_cuts(run.points, layout.total(), cnn::AllreduceCost{},
                                          static_cast<std::uint32_t>(cuts)));
    run.buckets = overlap->plan().buckets.size();
  }
  cnn::OptimizerSettings opt;
  opt.kind = optimizer;
  opt.lr = 0.05f;
  const cnn::Sampler sampler(11, data.count());
  const std::int64_t global_batch = 50;  // 50 over 4 ranks: slices of 12 and 13; a short last batch of 40
  const std::int64_t per_epoch = cnn::batches_per_epoch(data.count(), global_batch);
  cnn::PhaseTimes times;
  for (int step = 0; step < 20; ++step) {
    if (step % per_epoch == 0) backend->begin_epoch(sampler.permutation(step / per_epoch));
    cnn::train_step(*backend, comm, opt, layout.total(), cnn::global_batch_range(step % per_epoch, data.count(), global_batch),
                    times, overlap.get());
    if (step == 0) run.first_step_calls = comm.calls;
  }
  run.params = backend->download_params();
  return run;
}

// The overlapped run's parameters against the plain run's, and the same on every rank.
void expect_equal_runs(const Run& overlapped, const Run& plain, const std::string& what) {
  const int ranks = MpiFixture::world->size();
  const double error = cnn::test::relative_error(overlapped.params, plain.params);
  BOOST_TEST_MESSAGE(what << " ranks " << ranks << ": rel err " << error << ", first step " << overlapped.first_step_calls);
  if (ranks == 2)
    BOOST_TEST(overlapped.params == plain.params, what << ": not bitwise equal, rel err " << error);
  else
    BOOST_TEST(error <= 1e-6, what << ": rel err " << error);
  std::vector<float> root = overlapped.params;
  MpiFixture::world->broadcast(root.data(), static_cast<std::int64_t>(root.size() * sizeof(float)));
  BOOST_TEST(root == overlapped.params);
}

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

BOOST_AUTO_TEST_CASE(overlapped_steps_equal_plain_steps) {
  const cnn::Network net = seed_network();
  const std::int64_t fc_offset = net.layout.find("fc.weight").offset;
  for (const char* kind : {"seq", "threads"}) {
    for (const cnn::OptimizerKind optimizer : {cnn::OptimizerKind::kSgd, cnn::OptimizerKind::kMomentum}) {
      const Run plain = train(net, kind, optimizer, -1);
      for (const int cuts : {1, 0}) {  // the fc bucket early, then the conv bucket; or one bucket at the end
        const Run overlapped = train(net, kind, optimizer, cuts);
        BOOST_TEST(overlapped.buckets == (cuts == 1 ? 2u : 1u));
        expect_equal_runs(overlapped, plain,
                          std::string(kind) + " optimizer " + std::to_string(static_cast<int>(optimizer)) + " cuts " +
                              std::to_string(cuts));
        if (cuts == 1) {
          // fc bucket started, MPI polled during the conv backward, then the conv bucket, then the wait.
          const std::string expected = "S" + std::to_string(fc_offset) + " pS0  W|";
          BOOST_TEST(overlapped.first_step_calls == expected);
        } else {
          BOOST_TEST(overlapped.first_step_calls == "pS0  W|");
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(every_layer_with_parameters_is_a_bucket_of_its_own) {
  // 3x20x20: every layer of the preset, small (18 -> 9 -> 7 -> 3 -> 1).
  const cnn::Network net = cnn::build_network("cifar", 0, cnn::TensorShape{3, 20, 20}, 10);
  for (const char* kind : {"seq", "threads"}) {
    const Run plain = train(net, kind, cnn::OptimizerKind::kAdam, -1);
    // fc2, fc1, conv3, conv2 each started as its backward ends, MPI polled under the layers below,
    // conv1 at the end.
    const std::vector<cnn::GradientReadyPoint>& points = plain.points;
    BOOST_TEST_REQUIRE(points.size() == 5u);
    std::string expected;
    for (std::size_t p = 0; p + 1 < points.size(); ++p) expected += "S" + std::to_string(points[p].offset) + " p";
    expected += "S0  W|";
    const std::uint32_t every_cut = (1u << (points.size() - 1)) - 1u;
    for (const std::uint32_t cuts : {every_cut, 0b0101u, 0u}) {
      const Run overlapped = train(net, kind, cnn::OptimizerKind::kAdam, static_cast<int>(cuts));
      expect_equal_runs(overlapped, plain, std::string("cifar ") + kind + " cuts " + std::to_string(cuts));
      if (cuts == every_cut) {
        BOOST_TEST(overlapped.buckets == points.size());
        BOOST_TEST(overlapped.first_step_calls == expected);
      }
      if (cuts == 0u) BOOST_TEST(overlapped.first_step_calls == "pS0  W|");
    }
  }
}

BOOST_AUTO_TEST_CASE(a_residual_block_is_one_bucket_of_its_layers) {
  // conv1, a projection block (its convs and its shortcut: one op, one ready range spanning them), a
  // block whose body ends with a max-pool (its winners kept per micro-batch slot), fc: 20 -> 10 -> 5.
  const cnn::Network net = cnn::build_network(
      "conv3x3:6/p1 relu res[conv3x3:8/s2/p1 relu conv3x3:8/p1] relu res[conv3x3:8/p1 relu maxpool2] fc:10", 0,
      cnn::TensorShape{3, 20, 20}, 10);
  for (const char* kind : {"seq", "threads"}) {
    const Run plain = train(net, kind, cnn::OptimizerKind::kMomentum, -1);
    // fc, the second block, the first block, conv1: each block's range is its whole span.
    const std::vector<cnn::GradientReadyPoint>& points = plain.points;
    BOOST_TEST_REQUIRE(points.size() == 4u);
    BOOST_TEST(points[1].offset == net.layers[4].weight_offset);
    BOOST_TEST(points[1].count == net.layers[4].param_count);
    BOOST_TEST(points[2].offset == net.layers[2].weight_offset);
    BOOST_TEST(points[2].count == net.layers[2].param_count);
    BOOST_TEST(points[3].offset == 0);
    std::string expected;
    for (std::size_t p = 0; p + 1 < points.size(); ++p) expected += "S" + std::to_string(points[p].offset) + " p";
    expected += "S0  W|";
    const std::uint32_t every_cut = (1u << (points.size() - 1)) - 1u;
    for (const std::uint32_t cuts : {every_cut, 0b010u, 0u}) {
      const Run overlapped = train(net, kind, cnn::OptimizerKind::kMomentum, static_cast<int>(cuts));
      expect_equal_runs(overlapped, plain, std::string("residual ") + kind + " cuts " + std::to_string(cuts));
      if (cuts == every_cut) {
        BOOST_TEST(overlapped.buckets == points.size());
        BOOST_TEST(overlapped.first_step_calls == expected);
      }
      if (cuts == 0u) BOOST_TEST(overlapped.first_step_calls == "pS0  W|");
    }
  }
}
