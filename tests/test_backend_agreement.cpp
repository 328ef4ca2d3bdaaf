// `threads` against the `seq` reference: one step's loss and every gradient agree to 1e-5 relative
// error, on several random batches, for several thread counts and filter counts. `seq` runs the seed
// layer by layer, `threads` with its fused conv_relu_pool op, so this also holds that op to the
// formulas. And a backend run twice gives bitwise identical results.
#define BOOST_TEST_MODULE backend_agreement
#include <cmath>
#include <numeric>

#include "boost_test.hpp"
#include "cnn/backend.hpp"
#include "cnn/network.hpp"
#include "cnn/sampler.hpp"
#include "test_util.hpp"

namespace {

struct StepResult {
  std::vector<float> grads;
  cnn::BatchStats stats;
};

StepResult one_step(const std::string& kind, int threads, const cnn::SeedModel& model, const cnn::Dataset& train,
                    const std::vector<float>& params, const std::vector<std::int32_t>& order, std::int64_t first,
                    std::int64_t count) {
  cnn::BackendOptions options;
  options.kind = cnn::parse_backend_kind(kind);
  options.threads = threads;
  auto backend = cnn::make_backend(options, cnn::seed_network(model));
  backend->bind_data(train, train);
  backend->upload_params(params);
  backend->begin_epoch(order);
  backend->compute_gradients(first, count);
  StepResult result;
  const float* g = backend->grads();
  result.grads.assign(g, g + model.layout().total());
  result.stats = backend->take_train_stats();
  return result;
}

}  // namespace

BOOST_AUTO_TEST_CASE(threads_agree_with_seq_on_loss_and_every_gradient) {
  const cnn::Dataset train = cnn::test::random_dataset(400, {1, 28, 28}, 21);
  for (int filters : {32, 64}) {
    cnn::SeedModel model;
    model.input = train.shape;
    model.filters = filters;
    const cnn::ParamLayout layout = model.layout();
    std::vector<float> params(static_cast<std::size_t>(layout.total()));
    cnn::initialize_params(params.data(), layout, 99);
    const std::vector<std::int32_t> order = cnn::Sampler(7, train.count()).permutation(0);
    for (const auto& [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 100}, {100, 37}, {250, 150}}) {
      const StepResult reference = one_step("seq", 1, model, train, params, order, first, count);
      for (int threads : {2, 3, 4}) {
        const StepResult other = one_step("threads", threads, model, train, params, order, first, count);
        BOOST_TEST(other.stats.count == reference.stats.count);
        BOOST_TEST(other.stats.correct == reference.stats.correct);
        BOOST_TEST(std::fabs(other.stats.loss_sum - reference.stats.loss_sum) <= 1e-5 * std::fabs(reference.stats.loss_sum));
        for (const cnn::ParamView& view : layout.views()) {
          const std::vector<float> a(other.grads.begin() + view.offset, other.grads.begin() + view.offset + view.size);
          const std::vector<float> b(reference.grads.begin() + view.offset,
                                     reference.grads.begin() + view.offset + view.size);
          const double error = cnn::test::relative_error(a, b);
          BOOST_TEST(error <= 1e-5, "d=" << filters << " threads=" << threads << " batch " << first << "+" << count
                                         << " " << view.name() << " rel err " << error);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(same_configuration_twice_is_bitwise_identical) {
  const cnn::Dataset train = cnn::test::random_dataset(300, {1, 28, 28}, 22);
  cnn::SeedModel model;
  model.input = train.shape;
  model.filters = 16;
  std::vector<float> params(static_cast<std::size_t>(model.layout().total()));
  cnn::initialize_params(params.data(), model.layout(), 3);
  const std::vector<std::int32_t> order = cnn::Sampler(1, train.count()).permutation(2);
  const StepResult a = one_step("threads", 3, model, train, params, order, 10, 200);
  const StepResult b = one_step("threads", 3, model, train, params, order, 10, 200);
  BOOST_TEST(a.grads == b.grads);
  BOOST_TEST(a.stats.loss_sum == b.stats.loss_sum);
}

BOOST_AUTO_TEST_CASE(an_empty_slice_gives_zero_gradients) {
  const cnn::Dataset train = cnn::test::random_dataset(10, {1, 28, 28}, 23);
  cnn::SeedModel model;
  model.input = train.shape;
  model.filters = 8;
  std::vector<float> params(static_cast<std::size_t>(model.layout().total()), 0.5f);
  const std::vector<std::int32_t> order = cnn::Sampler(1, train.count()).permutation(0);
  const StepResult r = one_step("threads", 2, model, train, params, order, 5, 0);
  BOOST_TEST(r.stats.count == 0);
  BOOST_TEST(std::all_of(r.grads.begin(), r.grads.end(), [](float g) { return g == 0.0f; }));
}

// The layers of general networks (not the seed) through both CPU backends: `threads` against the
// `seq` reference on one step's loss and every gradient, for specs holding the pooling and dropout
// layers where they can stand (after ReLUs, in a residual body, after the features start).
BOOST_AUTO_TEST_CASE(threads_agree_with_seq_on_networks_with_every_layer_kind) {
  const cnn::Dataset train = cnn::test::random_dataset(120, {3, 12, 12}, 24);
  const std::vector<std::int32_t> order = cnn::Sampler(5, train.count()).permutation(0);
  for (const char* spec : {"conv3x3:6/p1 relu avgpool2 conv3x3:8/p1 relu avgpool fc:10",
                           "conv3x3:6 relu avgpool3/s2 res[conv3x3:6/p1 relu avgpool2] fc:16 relu fc:10",
                           "conv3x3:6/p1 relu dropout:0.25 maxpool2 res[conv3x3:6/p1 dropout:0.5 relu] fc:16 relu "
                           "dropout:0.5 fc:10",
                           "conv3x3:6/p1 bn relu maxpool2 res[conv3x3:6/p1 bn relu conv3x3:6/p1 bn] fc:16 bn relu fc:10"}) {
    const cnn::Network net = cnn::build_network(spec, 0, train.shape, 10);
    std::vector<float> params(static_cast<std::size_t>(net.layout.total()));
    cnn::initialize_params(params.data(), net.layout, 8);
    const auto step = [&](cnn::BackendKind kind, int threads) {
      cnn::BackendOptions options;
      options.kind = kind;
      options.threads = threads;
      auto backend = cnn::make_backend(options, net);
      backend->set_step_randomness({3, 17, 5});  // dropout's masks of step 17, the global batch from index 5
      backend->bind_data(train, train);
      backend->upload_params(params);
      backend->begin_epoch(order);
      backend->compute_gradients(7, 100);
      StepResult result;
      result.grads.assign(backend->grads(), backend->grads() + net.layout.total());
      result.stats = backend->take_train_stats();
      return result;
    };
    const StepResult reference = step(cnn::BackendKind::kSeq, 1);
    for (int threads : {2, 3}) {
      const StepResult other = step(cnn::BackendKind::kThreads, threads);
      BOOST_TEST(other.stats.correct == reference.stats.correct);
      BOOST_TEST(std::fabs(other.stats.loss_sum - reference.stats.loss_sum) <= 1e-5 * std::fabs(reference.stats.loss_sum));
      for (const cnn::ParamView& view : net.layout.views()) {
        const std::vector<float> a(other.grads.begin() + view.offset, other.grads.begin() + view.offset + view.size);
        const std::vector<float> b(reference.grads.begin() + view.offset,
                                   reference.grads.begin() + view.offset + view.size);
        // A bias right before a bn layer has gradient 0 but for rounding (relative to a hundredth of the whole).
        const double error = cnn::test::relative_error_floored(a, b, 1e-2 * cnn::test::norm_of(reference.grads));
        BOOST_TEST(error <= 1e-5, spec << " threads=" << threads << " " << view.name() << " rel err " << error);
      }
    }
  }
}
