// Rank equivalence, run under mpiexec -n 2 and -n 4: N ranks with global batch B compute the same
// mathematics as 1 rank with batch B. Every rank trains with the real MPI communicator, and also
// computes the one-rank reference alone (LocalCommunicator); after 24 steps (more than two epochs,
// uneven rank slices, a short last batch) the parameters agree to 1e-5 relative error, also with a
// cosine lr and warm-up, weight decay, Nesterov momentum or AdamW, and label smoothing. Two N-rank
// runs are bitwise identical.
#define BOOST_TEST_MODULE mpi_rank_equivalence
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "boost_test.hpp"
#include "cnn/config.hpp"
#include "cnn/lr_schedule.hpp"
#include "cnn/network.hpp"
#include "cnn/sampler.hpp"
#include "cnn/train_step.hpp"
#include "test_util.hpp"

namespace {

// MPI lives as long as the test module.
struct MpiFixture {
  MpiFixture() { world = std::make_unique<cnn::MpiWorld>(&boost::unit_test::framework::master_test_suite().argc,
                                                         &boost::unit_test::framework::master_test_suite().argv); }
  ~MpiFixture() { world.reset(); }
  static std::unique_ptr<cnn::MpiWorld> world;
};
std::unique_ptr<cnn::MpiWorld> MpiFixture::world;

// What a run trains beyond the optimizer: a --model spec (empty: the seed model at 16 filters), the lr
// of each step (null: opt.lr throughout), the training loss's label smoothing, the --augment text and
// --bn-local.
struct RunSettings {
  std::string spec;
  const cnn::LearningRate* lr = nullptr;
  float label_smoothing = 0.0f;
  std::string augment = "none";
  bool bn_local = false;
};

std::vector<float> train_steps(cnn::Communicator& comm, const std::string& kind, cnn::OptimizerSettings opt,
                               int steps, std::int64_t global_batch, const RunSettings& run = {}) {
  // Real images: on uniform-noise images with random labels, lr 0.1 is chaotic and one float-level
  // flip of a pool winner grows past 1e-5 within 20 steps; real data is what the contract is about.
  static const cnn::Dataset train = [] {
    cnn::DataSplits data = cnn::load_dataset("fashion", cnn::kDefaultFashionDir);
    data.train.truncate(250);  // 250 = 8 batches of 30 + a short batch of 10
    return data.train;
  }();
  cnn::SeedModel model;
  model.input = train.shape;
  model.filters = 16;
  const cnn::Network net = run.spec.empty() ? cnn::seed_network(model) : cnn::build_network(run.spec, 0, train.shape, 10);
  const cnn::ParamLayout& layout = net.layout;
  cnn::BackendOptions options;
  options.kind = cnn::parse_backend_kind(kind);
  options.threads = 2;
  options.optimizer = opt.kind;
  options.label_smoothing = run.label_smoothing;
  options.augment = cnn::parse_augment(run.augment);
  auto backend = cnn::make_backend(options, net);
  if (net.has_batch_norm() && !run.bn_local && comm.size() > 1) backend->set_statistics_communicator(&comm);  // as the trainer
  backend->bind_data(train, train);
  std::vector<float> params(static_cast<std::size_t>(layout.total()));
  cnn::initialize_params(params.data(), layout, 17);
  backend->upload_params(params);
  const cnn::Sampler sampler(9, train.count());
  const std::int64_t per_epoch = cnn::batches_per_epoch(train.count(), global_batch);
  cnn::PhaseTimes times;
  for (int step = 0; step < steps; ++step) {
    if (step % per_epoch == 0) backend->begin_epoch(sampler.permutation(step / per_epoch));
    opt.step = step + 1;
    if (run.lr != nullptr) opt.lr = run.lr->at_float(step);
    const cnn::Range batch = cnn::global_batch_range(step % per_epoch, train.count(), global_batch);
    backend->set_step_randomness({9, step, batch.begin});  // as the trainer does: dropout's masks
    cnn::train_step(*backend, comm, opt, layout.total(), batch, times);
  }
  return backend->download_params();
}

// The contract: N ranks (threads, this communicator) end `steps` steps within 1e-5 relative of one
// rank alone (seq) with the same global batch. Returns the one-rank parameters and the error.
struct Agreement {
  std::vector<float> reference;
  double error;
};
Agreement check_ranks_match_one_rank(cnn::Communicator& comm, const cnn::OptimizerSettings& opt, int steps,
                                     std::int64_t global_batch, const RunSettings& run, const std::string& what) {
  const std::vector<float> distributed = train_steps(comm, "threads", opt, steps, global_batch, run);
  cnn::test::LocalCommunicator alone;
  Agreement result{train_steps(alone, "seq", opt, steps, global_batch, run), 0.0};
  result.error = cnn::test::relative_error(distributed, result.reference);
  BOOST_TEST_MESSAGE(what << ": ranks=" << comm.size() << " rel err " << result.error);
  BOOST_TEST(result.error <= 1e-5, what << ": " << comm.size() << " ranks vs 1 rank, rel err " << result.error);
  return result;
}

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

bool fashion_present() {
  const bool present = access((std::string(cnn::kDefaultFashionDir) + "/train-images-idx3-ubyte.gz").c_str(), R_OK) == 0;
  if (!present) std::cout << "SKIP: Fashion-MNIST not installed at " << cnn::kDefaultFashionDir
                          << " (tools/install-deps.sh installs it)" << std::endl;
  return present;
}

BOOST_AUTO_TEST_CASE(n_ranks_match_one_rank_with_the_same_global_batch,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return fashion_present(); })) {
  cnn::MpiCommunicator comm(*MpiFixture::world);
  for (const char* optimizer : {"sgd", "momentum"}) {
    cnn::OptimizerSettings opt;
    opt.kind = cnn::parse_optimizer(optimizer);
    opt.lr = 0.1f;
    // 30 over 4 ranks: slices of 7 and 8; 24 steps: more than two epochs of 250 images.
    const double error = check_ranks_match_one_rank(comm, opt, 24, 30, {}, optimizer).error;
    BOOST_TEST(error > 0.0);  // different summation order: identical bits would mean no communication happened
  }
}

BOOST_AUTO_TEST_CASE(n_ranks_match_one_rank_with_a_schedule_and_regularisers,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return fashion_present(); })) {
  cnn::MpiCommunicator comm(*MpiFixture::world);
  const std::int64_t global_batch = 30;
  const int steps = 24;
  for (const char* optimizer : {"momentum", "adamw"}) {
    cnn::OptimizerSettings opt;
    opt.kind = cnn::parse_optimizer(optimizer);
    const bool adam = opt.kind == cnn::OptimizerKind::kAdamW;
    opt.nesterov = !adam;
    opt.weight_decay = adam ? 0.05f : 1e-3f;
    const cnn::LearningRate lr(adam ? 1e-3 : 0.05, cnn::parse_lr_schedule("cosine"), 5,
                               cnn::batches_per_epoch(250, global_batch), steps);
    RunSettings run;
    run.lr = &lr;
    run.label_smoothing = 0.1f;
    BOOST_TEST(check_ranks_match_one_rank(comm, opt, steps, global_batch, run, optimizer).error > 0.0);
  }
}

// Dropout's masks follow the samples, not the ranks: each sample keeps its index in the global batch
// whatever slice it lands in, so N ranks drop what one rank drops (and average pooling sums alike).
BOOST_AUTO_TEST_CASE(n_ranks_match_one_rank_with_dropout,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return fashion_present(); })) {
  cnn::MpiCommunicator comm(*MpiFixture::world);
  cnn::OptimizerSettings opt;
  opt.kind = cnn::OptimizerKind::kMomentum;
  opt.lr = 0.05f;
  RunSettings run;
  run.spec = "conv3x3:8 relu avgpool2 dropout:0.25 conv3x3:8 relu avgpool fc:32 relu dropout:0.5 fc:10";
  const Agreement agreement = check_ranks_match_one_rank(comm, opt, 12, 30, run, "dropout");
  // The masks are drawn at all: without the dropout layers the run ends elsewhere.
  RunSettings without;
  without.spec = "conv3x3:8 relu avgpool2 conv3x3:8 relu avgpool fc:32 relu fc:10";
  cnn::test::LocalCommunicator alone;
  BOOST_TEST(agreement.error <
             cnn::test::relative_error(train_steps(alone, "seq", opt, 12, 30, without), agreement.reference));
}

// Augmentation follows the samples too: a sample's crop and flip are drawn from its index in the
// global batch, so N ranks train on the batches one rank does, over epochs (24 steps of 9 per epoch).
BOOST_AUTO_TEST_CASE(n_ranks_match_one_rank_with_augmentation,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return fashion_present(); })) {
  cnn::MpiCommunicator comm(*MpiFixture::world);
  cnn::OptimizerSettings opt;
  opt.kind = cnn::OptimizerKind::kMomentum;
  opt.lr = 0.05f;
  RunSettings run;
  run.augment = "crop:3,flip";
  const Agreement agreement = check_ranks_match_one_rank(comm, opt, 24, 30, run, "augment");
  // The batches are augmented at all: without it the run ends elsewhere.
  cnn::test::LocalCommunicator alone;
  BOOST_TEST(agreement.error < cnn::test::relative_error(train_steps(alone, "seq", opt, 24, 30), agreement.reference));
}

// bn's statistics over the global batch (the default): each step allreduces the per-channel sums in
// the middle of the forward and the backward, so N ranks normalise as one rank does with the same
// global batch (to the float rounding of the allreduced sums). --bn-local normalises with each rank's
// own slice: another computation, farther from the one-rank run.
BOOST_AUTO_TEST_CASE(n_ranks_match_one_rank_with_global_bn_statistics,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return fashion_present(); })) {
  cnn::MpiCommunicator comm(*MpiFixture::world);
  cnn::OptimizerSettings opt;
  opt.kind = cnn::OptimizerKind::kMomentum;
  opt.lr = 0.05f;
  RunSettings run;
  run.spec = "conv3x3:8 bn relu avgpool2 res[conv3x3:8/p1 bn relu conv3x3:8/p1 bn] relu fc:32 bn relu fc:10";
  const Agreement agreement = check_ranks_match_one_rank(comm, opt, 12, 30, run, "bn");
  const double error = agreement.error;
  if (comm.size() > 1) {
    run.bn_local = true;
    const std::vector<float> local = train_steps(comm, "threads", opt, 12, 30, run);
    const double local_error = cnn::test::relative_error(local, agreement.reference);
    BOOST_TEST_MESSAGE("bn --bn-local: ranks=" << comm.size() << " rel err " << local_error);
    BOOST_TEST(local_error > 100 * std::max(error, 1e-7), "--bn-local should not match one rank");
  }
}

BOOST_AUTO_TEST_CASE(same_rank_count_twice_is_bitwise_identical,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return fashion_present(); })) {
  cnn::MpiCommunicator comm(*MpiFixture::world);
  cnn::OptimizerSettings opt;
  const std::vector<float> a = train_steps(comm, "threads", opt, 20, 40);
  const std::vector<float> b = train_steps(comm, "threads", opt, 20, 40);
  BOOST_TEST(a == b);
  // And every rank holds the same parameters.
  std::vector<float> root = a;
  MpiFixture::world->broadcast(root.data(), static_cast<std::int64_t>(root.size() * sizeof(float)));
  BOOST_TEST(root == a);
}
