// The overlapped step (gradient_overlap.hpp) against the plain one, under mpiexec -n 2 and -n 4:
// 20 steps with the allreduce overlapped (MPI_Iallreduce of the fc bucket while the conv backward
// runs, then the rest) end with parameters BITWISE equal to 20 plain steps on 2 ranks, where an
// elementwise sum of two values is the same in any order; on 4 ranks MPI may sum a sub-range in
// another order than the whole buffer, so there they agree to 1e-6. The call order proves the
// overlap happened: the fc bucket's allreduce is started, MPI is polled during the conv backward,
// and only then the conv bucket is started and waited for.
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
  std::int64_t fc_offset = 0;
};

// cuts: the bucket plan (plan_with_cuts); < 0: the plain step.
Run train(const std::string& kind, cnn::OptimizerKind optimizer, int cuts) {
  static const cnn::Dataset data = cnn::test::random_dataset(240, cnn::TensorShape{1, 28, 28}, 5);
  cnn::SeedModel model;
  model.input = data.shape;
  model.filters = 8;
  const cnn::ParamLayout layout = model.layout();
  cnn::BackendOptions options;
  options.kind = cnn::parse_backend_kind(kind);
  options.threads = 2;
  options.optimizer = optimizer;
  auto backend = cnn::make_backend(options, cnn::seed_network(model));
  backend->bind_data(data, data);
  std::vector<float> params(static_cast<std::size_t>(layout.total()));
  cnn::initialize_params(params.data(), layout, 3);
  backend->upload_params(params);
  RecordingCommunicator comm(*MpiFixture::world);
  comm.base = backend->grads();
  std::unique_ptr<cnn::OverlapReducer> overlap;
  Run run;
  if (cuts >= 0) {
    overlap = std::make_unique<cnn::OverlapReducer>(comm, backend->grads(), layout.total());
    overlap->set_plan(cnn::plan_with_cuts(backend->gradient_ready_points(), layout.total(), cnn::AllreduceCost{},
                                          static_cast<std::uint32_t>(cuts)));
    run.buckets = overlap->plan().buckets.size();
  }
  run.fc_offset = layout.find("fc.weight").offset;
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

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

BOOST_AUTO_TEST_CASE(overlapped_steps_equal_plain_steps) {
  const int ranks = MpiFixture::world->size();
  for (const char* kind : {"seq", "threads"}) {
    for (const cnn::OptimizerKind optimizer : {cnn::OptimizerKind::kSgd, cnn::OptimizerKind::kMomentum}) {
      const Run plain = train(kind, optimizer, -1);
      for (const int cuts : {1, 0}) {  // the fc bucket early, then the conv bucket; or one bucket at the end
        const Run overlapped = train(kind, optimizer, cuts);
        BOOST_TEST(overlapped.buckets == (cuts == 1 ? 2u : 1u));
        const double error = cnn::test::relative_error(overlapped.params, plain.params);
        BOOST_TEST_MESSAGE(kind << " optimizer " << static_cast<int>(optimizer) << " cuts " << cuts << " ranks "
                                << ranks << ": rel err " << error << ", first step " << overlapped.first_step_calls);
        if (ranks == 2)
          BOOST_TEST(overlapped.params == plain.params, kind << " cuts " << cuts << ": not bitwise equal, rel err " << error);
        else
          BOOST_TEST(error <= 1e-6, kind << " cuts " << cuts << ": rel err " << error);
        if (cuts == 1) {
          // fc bucket started, MPI polled during the conv backward, then the conv bucket, then the wait.
          const std::string expected = "S" + std::to_string(overlapped.fc_offset) + " pS0  W|";
          BOOST_TEST(overlapped.first_step_calls == expected);
        } else {
          BOOST_TEST(overlapped.first_step_calls == "pS0  W|");
        }
        // Every rank holds the same parameters.
        std::vector<float> root = overlapped.params;
        MpiFixture::world->broadcast(root.data(), static_cast<std::int64_t>(root.size() * sizeof(float)));
        BOOST_TEST(root == overlapped.params);
      }
    }
  }
}
