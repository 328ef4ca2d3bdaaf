// --augment crop:P,flip (augment.hpp): the option's text, the per-sample draw (a pure function of the
// step's key and the sample's index in the global batch), the CPU gather against a plain reference
// (pad, crop, mirror), and the CPU backends: threads against seq, a global batch split in slices as
// ranks split it, and evaluation left unaugmented.
#define BOOST_TEST_MODULE augment
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "boost_test.hpp"
#include "cnn/augment.hpp"
#include "cnn/backend.hpp"
#include "cnn/errors.hpp"
#include "cnn/network.hpp"
#include "cnn/op_plan.hpp"
#include "cnn/ops.hpp"
#include "cnn/sampler.hpp"
#include "test_util.hpp"

namespace {

// The reference: pad the image with P zeros on each side, cut the H x W window at (dy, dx), mirror it
// left to right when drawn so, and scale to [0, 1] as gather_normalize does (times 1/255).
std::vector<float> reference_sample(const std::uint8_t* image, const cnn::TensorShape& shape, int pad,
                                    const cnn::AugmentDraw& draw) {
  const int h = shape.height, w = shape.width, ph = h + 2 * pad, pw = w + 2 * pad;
  std::vector<float> out(static_cast<std::size_t>(shape.size()));
  for (int c = 0; c < shape.channels; ++c) {
    std::vector<int> padded(static_cast<std::size_t>(ph * pw), 0);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) padded[(y + pad) * pw + x + pad] = image[(c * h + y) * w + x];
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const int crop_x = draw.flip ? w - 1 - x : x;
        out[(c * h + y) * w + x] = static_cast<float>(padded[(y + draw.dy) * pw + crop_x + draw.dx]) * (1.0f / 255.0f);
      }
  }
  return out;
}

struct Step {
  std::vector<float> grads;
  cnn::BatchStats stats;
};

Step train_step(const cnn::Network& net, const cnn::Dataset& data, const std::vector<float>& params,
                const std::vector<std::int32_t>& order, cnn::BackendKind kind, int threads, const cnn::Augment& augment,
                std::int64_t first, std::int64_t count, std::int64_t batch_begin) {
  cnn::BackendOptions options;
  options.kind = kind;
  options.threads = threads;
  options.augment = augment;
  auto backend = cnn::make_backend(options, net);
  backend->set_step_randomness({7, 12, batch_begin});
  backend->bind_data(data, data);
  backend->upload_params(params);
  backend->begin_epoch(order);
  backend->compute_gradients(first, count);
  Step step;
  step.grads.assign(backend->grads(), backend->grads() + net.layout.total());
  step.stats = backend->take_train_stats();
  return step;
}

}  // namespace

BOOST_AUTO_TEST_CASE(augment_text_parses_and_prints_back) {
  using cnn::parse_augment;
  BOOST_TEST(!parse_augment("none").active());
  BOOST_TEST(parse_augment("crop:4").pad == 4);
  BOOST_TEST(!parse_augment("crop:4").flip);
  BOOST_TEST(parse_augment("flip").flip);
  BOOST_TEST(parse_augment("flip,crop:2").pad == 2);
  for (const char* text : {"none", "crop:4", "flip", "crop:4,flip"})
    BOOST_TEST(cnn::augment_text(parse_augment(text)) == text);
  BOOST_TEST(cnn::augment_text(parse_augment("flip,crop:2")) == "crop:2,flip");
  for (const char* bad : {"", "crop", "crop:", "crop:0", "crop:-1", "crop:x", "crop:1.5", "crop:2000", "flip,flip",
                          "crop:1,crop:2", "flop", "flip,", ",flip", "none,flip", "Flip"})
    BOOST_CHECK_THROW(parse_augment(bad), cnn::UsageError);
  try {
    parse_augment("crop:2,mirror");
    BOOST_FAIL("no error");
  } catch (const cnn::UsageError& e) {
    BOOST_TEST(std::string(e.what()).find("--augment 'crop:2,mirror': unknown item 'mirror'") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(crop_must_fit_half_the_image) {
  BOOST_CHECK_NO_THROW(cnn::check_augment_fits(cnn::parse_augment("crop:14"), 28, 28));
  BOOST_CHECK_THROW(cnn::check_augment_fits(cnn::parse_augment("crop:15"), 28, 28), cnn::UsageError);
  BOOST_CHECK_THROW(cnn::check_augment_fits(cnn::parse_augment("crop:5"), 32, 9), cnn::UsageError);
  BOOST_CHECK_NO_THROW(cnn::check_augment_fits(cnn::parse_augment("flip"), 1, 1));
}

// A pure function of (key, sample): the same inputs give the same draw, every offset in [0, 2P] and
// both mirror states occur, and another step or sample draws otherwise.
BOOST_AUTO_TEST_CASE(draw_is_a_pure_function_covering_every_offset) {
  const int pad = 3;
  const std::uint64_t key = cnn::dropout_step_key(5, 40);
  std::set<int> dys, dxs;
  int flips = 0, differ_by_step = 0, differ_by_sample = 0;
  const std::uint64_t other_key = cnn::dropout_step_key(5, 41);
  for (std::uint64_t s = 0; s < 2000; ++s) {
    const cnn::AugmentDraw a = cnn::augment_draw(pad, true, key, s), b = cnn::augment_draw(pad, true, key, s);
    BOOST_TEST((a.dy == b.dy && a.dx == b.dx && a.flip == b.flip));
    BOOST_TEST((a.dy >= 0 && a.dy <= 2 * pad && a.dx >= 0 && a.dx <= 2 * pad));
    dys.insert(a.dy);
    dxs.insert(a.dx);
    flips += a.flip ? 1 : 0;
    const cnn::AugmentDraw o = cnn::augment_draw(pad, true, other_key, s);
    const cnn::AugmentDraw n = cnn::augment_draw(pad, true, key, s + 1);
    differ_by_step += (o.dy != a.dy || o.dx != a.dx || o.flip != a.flip) ? 1 : 0;
    differ_by_sample += (n.dy != a.dy || n.dx != a.dx || n.flip != a.flip) ? 1 : 0;
    BOOST_TEST(!cnn::augment_draw(pad, false, key, s).flip);  // flip off: never mirrored
  }
  BOOST_TEST(dys.size() == 7u);
  BOOST_TEST(dxs.size() == 7u);
  BOOST_TEST((flips > 900 && flips < 1100), flips);
  BOOST_TEST(differ_by_step > 1800);
  BOOST_TEST(differ_by_sample > 1800);
  // Pinned values: the draw is part of what a checkpoint's continuation depends on, so it must not
  // change between builds (host and device compute these bits alike).
  const cnn::AugmentDraw pinned = cnn::augment_draw(4, true, 0x0123456789abcdefULL, 17);
  const std::uint64_t bits = cnn::mix64(cnn::mix64(0x0123456789abcdefULL ^ 0xa0761d6478bd642fULL) +
                                        cnn::mix64(17 + 0xe7037ed1a0b428dbULL));
  BOOST_TEST(pinned.dy == static_cast<int>((bits & 0xffffff) % 9));
  BOOST_TEST(pinned.dx == static_cast<int>(((bits >> 24) & 0xffffff) % 9));
  BOOST_TEST(pinned.flip == ((bits >> 63) != 0));
}

BOOST_AUTO_TEST_CASE(gather_augment_is_pad_crop_and_mirror) {
  const cnn::TensorShape shape{3, 5, 7};
  const cnn::Dataset data = cnn::test::random_dataset(20, shape, 3);
  const std::vector<std::int32_t> indices = {4, 19, 0, 7, 7, 12, 3, 1, 15, 9, 2, 11};
  const std::int64_t n = static_cast<std::int64_t>(indices.size());
  for (const char* text : {"crop:2", "flip", "crop:2,flip", "crop:1,flip"}) {
    const cnn::Augment augment = cnn::parse_augment(text);
    const cnn::MaskOrigin origin{cnn::dropout_step_key(9, 3), 40};
    std::vector<float> out(static_cast<std::size_t>(n * shape.size()));
    cnn::gather_augment(out.data(), data.images.data(), indices.data(), n, shape, augment, origin);
    int flipped = 0, shifted = 0;
    for (std::int64_t s = 0; s < n; ++s) {
      const cnn::AugmentDraw draw = cnn::augment_draw(augment.pad, augment.flip, origin.step_key, 40 + s);
      flipped += draw.flip ? 1 : 0;
      shifted += (draw.dy != augment.pad || draw.dx != augment.pad) ? 1 : 0;
      const std::vector<float> want = reference_sample(data.image(indices[s]), shape, augment.pad, draw);
      const std::vector<float> got(out.begin() + s * shape.size(), out.begin() + (s + 1) * shape.size());
      BOOST_TEST((got == want), text << " sample " << s);
    }
    // The draws this test sees do exercise the mirror and the shift.
    if (augment.flip) BOOST_TEST(flipped > 0);
    if (augment.pad > 0) BOOST_TEST(shifted > 0);
  }
}

// Each CPU backend, with augmentation: threads against the seq reference on one step's loss and every
// gradient (the fused conv_relu_pool of `threads` reads the same augmented batch).
BOOST_AUTO_TEST_CASE(threads_agree_with_seq_with_augmentation) {
  const cnn::Dataset train = cnn::test::random_dataset(150, {1, 12, 12}, 31);
  const std::vector<std::int32_t> order = cnn::Sampler(5, train.count()).permutation(0);
  const cnn::Augment augment = cnn::parse_augment("crop:2,flip");
  for (const char* spec : {"conv3x3:6 relu maxpool2 fc:10", "conv3x3:6/p1 relu avgpool2 fc:16 relu fc:10"}) {
    const cnn::Network net = cnn::build_network(spec, 0, train.shape, 10);
    std::vector<float> params(static_cast<std::size_t>(net.layout.total()));
    cnn::initialize_params(params.data(), net.layout, 8);
    const Step reference = train_step(net, train, params, order, cnn::BackendKind::kSeq, 1, augment, 7, 100, 7);
    const Step plain = train_step(net, train, params, order, cnn::BackendKind::kSeq, 1, {}, 7, 100, 7);
    BOOST_TEST(cnn::test::relative_error(plain.grads, reference.grads) > 1e-3, "augmentation changed nothing");
    for (int threads : {2, 3}) {
      const Step other = train_step(net, train, params, order, cnn::BackendKind::kThreads, threads, augment, 7, 100, 7);
      BOOST_TEST(other.stats.correct == reference.stats.correct);
      BOOST_TEST(std::fabs(other.stats.loss_sum - reference.stats.loss_sum) <= 1e-5 * std::fabs(reference.stats.loss_sum));
      const double error = cnn::test::relative_error(other.grads, reference.grads);
      BOOST_TEST(error <= 1e-5, spec << " threads=" << threads << " rel err " << error);
    }
  }
}

// A global batch cut in slices, as ranks cut it: each slice's samples draw what they draw in the whole
// batch (their index in the global batch, not in the slice), so the slices' gradients sum to the
// whole batch's.
BOOST_AUTO_TEST_CASE(slices_of_a_global_batch_draw_what_the_whole_batch_draws) {
  const cnn::Dataset train = cnn::test::random_dataset(120, {3, 10, 10}, 5);
  const std::vector<std::int32_t> order = cnn::Sampler(2, train.count()).permutation(1);
  const cnn::Augment augment = cnn::parse_augment("crop:3,flip");
  const cnn::Network net = cnn::build_network("conv3x3:4/p1 relu maxpool2 fc:10", 0, train.shape, 10);
  std::vector<float> params(static_cast<std::size_t>(net.layout.total()));
  cnn::initialize_params(params.data(), net.layout, 4);
  const Step whole = train_step(net, train, params, order, cnn::BackendKind::kSeq, 1, augment, 20, 60, 20);
  std::vector<double> sum(whole.grads.size(), 0.0);
  for (const auto& [first, count] : {std::pair<std::int64_t, std::int64_t>{20, 23}, {43, 20}, {63, 17}}) {
    const Step slice = train_step(net, train, params, order, cnn::BackendKind::kSeq, 1, augment, first, count, 20);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += slice.grads[i];
  }
  const std::vector<float> summed(sum.begin(), sum.end());
  const double error = cnn::test::relative_error(summed, whole.grads);
  BOOST_TEST(error <= 1e-5, "slices against the whole batch: rel err " << error);
  // Numbering the slice's samples from the slice's own start instead draws other crops.
  const Step renumbered = train_step(net, train, params, order, cnn::BackendKind::kSeq, 1, augment, 43, 20, 43);
  const Step numbered = train_step(net, train, params, order, cnn::BackendKind::kSeq, 1, augment, 43, 20, 20);
  BOOST_TEST(cnn::test::relative_error(renumbered.grads, numbered.grads) > 1e-3);
}

// Evaluation is never augmented: a backend made with --augment evaluates the test set exactly as one
// without it does.
BOOST_AUTO_TEST_CASE(evaluation_is_not_augmented) {
  const cnn::Dataset data = cnn::test::random_dataset(90, {1, 12, 12}, 17);
  const cnn::Network net = cnn::build_network("conv3x3:6 relu maxpool2 fc:10", 0, data.shape, 10);
  std::vector<float> params(static_cast<std::size_t>(net.layout.total()));
  cnn::initialize_params(params.data(), net.layout, 3);
  for (cnn::BackendKind kind : {cnn::BackendKind::kSeq, cnn::BackendKind::kThreads}) {
    std::vector<std::vector<float>> logits;
    std::vector<cnn::BatchStats> stats;
    for (const char* text : {"none", "crop:4,flip"}) {
      cnn::BackendOptions options;
      options.kind = kind;
      options.threads = 2;
      options.augment = cnn::parse_augment(text);
      auto backend = cnn::make_backend(options, net);
      backend->set_step_randomness({7, 3, 0});
      backend->bind_data(data, data);
      backend->upload_params(params);
      logits.emplace_back(static_cast<std::size_t>(90 * 10));
      stats.push_back(backend->evaluate_logits(0, 90, logits.back().data()));
    }
    BOOST_TEST((logits[0] == logits[1]), "evaluation differs with --augment");
    BOOST_TEST(stats[0].loss_sum == stats[1].loss_sum);
    BOOST_TEST(stats[0].correct == stats[1].correct);
  }
}

// On the GPU the augmentation runs in the gather kernel, so with --augment no op may read the uint8 data
// set itself: the seed model's whole-step fusion and a first conv_relu_pool's own reads give way (the
// plan is host code, checked here; tests/gpu_backend.cpp runs it).
BOOST_AUTO_TEST_CASE(cuda_plan_gathers_every_batch_with_augmentation) {
  cnn::SeedModel model;
  model.input = {1, 28, 28};
  model.filters = 8;
  const cnn::Network seed = cnn::seed_network(model);
  BOOST_TEST(cnn::plan_ops(seed, cnn::FusionTarget::kCuda).front().reads_data);
  const std::vector<cnn::Op> gathered = cnn::plan_ops(seed, cnn::FusionTarget::kCuda, true);
  BOOST_TEST(!gathered.front().reads_data);
  BOOST_TEST(cnn::describe_ops(gathered) == "conv_relu_pool fc_softmax");
  const cnn::Network layers = cnn::build_network("conv3x3:8 relu maxpool2 fc:32 relu fc:10", 0, model.input, 10);
  BOOST_TEST(cnn::plan_ops(layers, cnn::FusionTarget::kCuda).front().reads_data);
  BOOST_TEST(!cnn::plan_ops(layers, cnn::FusionTarget::kCuda, true).front().reads_data);
}
