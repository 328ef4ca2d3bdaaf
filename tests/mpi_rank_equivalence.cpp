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

// lr: the lr of each step (null: opt.lr throughout); label_smoothing: the training loss's; spec: a
// --model spec, or empty for the seed model at 16 filters; augment: the --augment text.
std::vector<float> train_steps(cnn::Communicator& comm, const std::string& kind, cnn::OptimizerSettings opt,
                               int steps, std::int64_t global_batch, const cnn::LearningRate* lr = nullptr,
                               float label_smoothing = 0.0f, const std::string& spec = "",
                               const std::string& augment = "none", bool bn_local = false) {
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
  const cnn::Network net = spec.empty() ? cnn::seed_network(model) : cnn::build_network(spec, 0, train.shape, 10);
  const cnn::ParamLayout& layout = net.layout;
  cnn::BackendOptions options;
  options.kind = cnn::parse_backend_kind(kind);
  options.threads = 2;
  options.optimizer = opt.kind;
  options.label_smoothing = label_smoothing;
  options.augment = cnn::parse_augment(augment);
  auto backend = cnn::make_backend(options, net);
  if (net.has_batch_norm() && !bn_local && comm.size() > 1) backend->set_statistics_communicator(&comm);  // as the trainer
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
    if (lr != nullptr) opt.lr = lr->at_float(step);
    const cnn::Range batch = cnn::global_batch_range(step % per_epoch, train.count(), global_batch);
    backend->set_step_randomness({9, step, batch.begin});  // as the trainer does: dropout's masks
    cnn::train_step(*backend, comm, opt, layout.total(), batch, times);
  }
  return backend->download_params();
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
    const std::int64_t global_batch = 30;  // 30 over 4 ranks: slices of 7 and 8
    const int steps = 24;
    const std::vector<float> distributed = train_steps(comm, "threads", opt, steps, global_batch);
    cnn::test::LocalCommunicator alone;
    const std::vector<float> reference = train_steps(alone, "seq", opt, steps, global_batch);
    const double error = cnn::test::relative_error(distributed, reference);
    BOOST_TEST_MESSAGE("ranks=" << comm.size() << " optimizer=" << optimizer << " rel err " << error);
    BOOST_TEST(error <= 1e-5, optimizer << ": " << comm.size() << " ranks vs 1 rank, rel err " << error);
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
    const std::vector<float> distributed = train_steps(comm, "threads", opt, steps, global_batch, &lr, 0.1f);
    cnn::test::LocalCommunicator alone;
    const std::vector<float> reference = train_steps(alone, "seq", opt, steps, global_batch, &lr, 0.1f);
    const double error = cnn::test::relative_error(distributed, reference);
    BOOST_TEST_MESSAGE("ranks=" << comm.size() << " optimizer=" << optimizer << " rel err " << error);
    BOOST_TEST(error <= 1e-5, optimizer << ": " << comm.size() << " ranks vs 1 rank, rel err " << error);
    BOOST_TEST(error > 0.0);
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
  const std::string spec = "conv3x3:8 relu avgpool2 dropout:0.25 conv3x3:8 relu avgpool fc:32 relu dropout:0.5 fc:10";
  const std::vector<float> distributed = train_steps(comm, "threads", opt, 12, 30, nullptr, 0.0f, spec);
  cnn::test::LocalCommunicator alone;
  const std::vector<float> reference = train_steps(alone, "seq", opt, 12, 30, nullptr, 0.0f, spec);
  const double error = cnn::test::relative_error(distributed, reference);
  BOOST_TEST_MESSAGE("dropout: ranks=" << comm.size() << " rel err " << error);
  BOOST_TEST(error <= 1e-5, "dropout: " << comm.size() << " ranks vs 1 rank, rel err " << error);
  // The masks are drawn at all: without the step's randomness the run differs.
  BOOST_TEST(error < cnn::test::relative_error(train_steps(alone, "seq", opt, 12, 30, nullptr, 0.0f, "conv3x3:8 relu avgpool2 "
                                                           "conv3x3:8 relu avgpool fc:32 relu fc:10"),
                                               reference));
}

// Augmentation follows the samples too: a sample's crop and flip are drawn from its index in the
// global batch, so N ranks train on the batches one rank does, over epochs (24 steps of 9 per epoch).
BOOST_AUTO_TEST_CASE(n_ranks_match_one_rank_with_augmentation,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return fashion_present(); })) {
  cnn::MpiCommunicator comm(*MpiFixture::world);
  cnn::OptimizerSettings opt;
  opt.kind = cnn::OptimizerKind::kMomentum;
  opt.lr = 0.05f;
  const std::vector<float> distributed = train_steps(comm, "threads", opt, 24, 30, nullptr, 0.0f, "", "crop:3,flip");
  cnn::test::LocalCommunicator alone;
  const std::vector<float> reference = train_steps(alone, "seq", opt, 24, 30, nullptr, 0.0f, "", "crop:3,flip");
  const double error = cnn::test::relative_error(distributed, reference);
  BOOST_TEST_MESSAGE("augment: ranks=" << comm.size() << " rel err " << error);
  BOOST_TEST(error <= 1e-5, "augment: " << comm.size() << " ranks vs 1 rank, rel err " << error);
  // The batches are augmented at all: without it the run ends elsewhere.
  BOOST_TEST(error < cnn::test::relative_error(train_steps(alone, "seq", opt, 24, 30), reference));
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
  const std::string spec = "conv3x3:8 bn relu avgpool2 res[conv3x3:8/p1 bn relu conv3x3:8/p1 bn] relu fc:32 bn relu fc:10";
  const std::vector<float> distributed = train_steps(comm, "threads", opt, 12, 30, nullptr, 0.0f, spec);
  cnn::test::LocalCommunicator alone;
  const std::vector<float> reference = train_steps(alone, "seq", opt, 12, 30, nullptr, 0.0f, spec);
  const double error = cnn::test::relative_error(distributed, reference);
  BOOST_TEST_MESSAGE("bn: ranks=" << comm.size() << " rel err " << error);
  BOOST_TEST(error <= 1e-5, "bn: " << comm.size() << " ranks vs 1 rank, rel err " << error);
  if (comm.size() > 1) {
    const std::vector<float> local = train_steps(comm, "threads", opt, 12, 30, nullptr, 0.0f, spec, "none", true);
    const double local_error = cnn::test::relative_error(local, reference);
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
