// Hand-computed cases for the CPU ops: values a person can check on paper.
#define BOOST_TEST_MODULE ops
#include <cmath>
#include <vector>

#include "boost_test.hpp"
#include "cnn/ops.hpp"

namespace {

// One filter whose only non-zero tap is the centre: the conv output equals the input's interior.
cnn::SeedModel tiny_model(int height, int width) {
  cnn::SeedModel m;
  m.input = {1, height, width};
  m.filters = 1;
  m.classes = 2;
  return m;
}

const std::vector<float> kCentreTap = {0, 0, 0, 0, 1, 0, 0, 0, 0};

}  // namespace

BOOST_AUTO_TEST_CASE(max_pool_picks_the_largest_and_records_where) {
  const cnn::SeedModel m = tiny_model(4, 4);  // conv 2x2 -> one pool cell
  // Interior (rows 1-2, cols 1-2) = [[1, 5], [3, 2]]: the maximum 5 sits at (0, 1) -> argmax 1.
  const std::vector<float> in = {0, 0, 0, 0,  //
                                 0, 1, 5, 0,  //
                                 0, 3, 2, 0,  //
                                 0, 0, 0, 0};
  const float bias = 0.5f;
  float pooled = -1;
  std::uint8_t argmax = 9;
  cnn::conv_relu_pool_forward(&pooled, &argmax, in.data(), kCentreTap.data(), &bias, 1, m);
  BOOST_TEST(pooled == 5.5f);
  BOOST_TEST(argmax == 1);
}

BOOST_AUTO_TEST_CASE(max_pool_ties_keep_the_first_candidate) {
  const cnn::SeedModel m = tiny_model(4, 4);
  const std::vector<float> in = {0, 0, 0, 0, 0, 2, 1, 0, 0, 7, 7, 0, 0, 0, 0, 0};  // 7 at (1,0) and (1,1)
  const float bias = 0.0f;
  float pooled = -1;
  std::uint8_t argmax = 9;
  cnn::conv_relu_pool_forward(&pooled, &argmax, in.data(), kCentreTap.data(), &bias, 1, m);
  BOOST_TEST(pooled == 7.0f);
  BOOST_TEST(argmax == 2);
}

BOOST_AUTO_TEST_CASE(relu_zeroes_a_negative_maximum_and_blocks_its_gradient) {
  const cnn::SeedModel m = tiny_model(4, 4);
  const std::vector<float> in = {0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0};
  const float bias = -10.0f;  // every conv value negative
  float pooled = -1;
  std::uint8_t argmax = 9;
  cnn::conv_relu_pool_forward(&pooled, &argmax, in.data(), kCentreTap.data(), &bias, 1, m);
  BOOST_TEST(pooled == 0.0f);
  std::vector<float> grad_w(9, 0.0f);
  float grad_b = 0.0f;
  const float grad_pooled = 1.0f;
  cnn::conv_relu_pool_backward(grad_w.data(), &grad_b, &grad_pooled, &pooled, &argmax, in.data(), 1, m);
  BOOST_TEST(grad_b == 0.0f);
  for (float g : grad_w) BOOST_TEST(g == 0.0f);
}

BOOST_AUTO_TEST_CASE(conv_gradient_is_the_winners_window_times_the_upstream_gradient) {
  const cnn::SeedModel m = tiny_model(4, 4);
  std::vector<float> in(16);
  for (int i = 0; i < 16; ++i) in[static_cast<std::size_t>(i)] = static_cast<float>(i);  // 0..15 row-major
  // Centre tap: conv = [[5, 6], [9, 10]] -> winner (1,1) = 10, window rows 1-3, cols 1-3.
  const float bias = 0.0f;
  float pooled = 0;
  std::uint8_t argmax = 0;
  cnn::conv_relu_pool_forward(&pooled, &argmax, in.data(), kCentreTap.data(), &bias, 1, m);
  BOOST_TEST(pooled == 10.0f);
  BOOST_TEST(argmax == 3);
  std::vector<float> grad_w(9, 1.0f);  // backward accumulates: start from 1
  float grad_b = 1.0f;
  const float grad_pooled = 2.0f;
  cnn::conv_relu_pool_backward(grad_w.data(), &grad_b, &grad_pooled, &pooled, &argmax, in.data(), 1, m);
  const std::vector<float> window = {5, 6, 7, 9, 10, 11, 13, 14, 15};
  for (int t = 0; t < 9; ++t) BOOST_TEST(grad_w[static_cast<std::size_t>(t)] == 1.0f + 2.0f * window[static_cast<std::size_t>(t)]);
  BOOST_TEST(grad_b == 3.0f);
}

BOOST_AUTO_TEST_CASE(fully_connected_forward_and_backward_by_hand) {
  const std::vector<float> in = {1, 2, 3};             // n=1, I=3
  const std::vector<float> weight = {1, 0, -1, 2, 1, 0};  // O=2
  const std::vector<float> bias = {0.5f, -1};
  std::vector<float> out(2);
  cnn::fc_forward(out.data(), in.data(), weight.data(), bias.data(), 1, 3, 2);
  BOOST_TEST(out[0] == 1 - 3 + 0.5f);
  BOOST_TEST(out[1] == 2 + 2 - 1.0f);
  const std::vector<float> grad_out = {1, -2};
  std::vector<float> grad_in(3), grad_w(6, 0.0f), grad_b(2, 0.0f);
  cnn::fc_backward(grad_in.data(), grad_w.data(), grad_b.data(), grad_out.data(), in.data(), weight.data(), 1, 3, 2);
  const std::vector<float> expected_in = {1 * 1 - 2 * 2, 0 - 2 * 1, -1 - 0};
  const std::vector<float> expected_w = {1, 2, 3, -2, -4, -6};
  for (int i = 0; i < 3; ++i) BOOST_TEST(grad_in[static_cast<std::size_t>(i)] == expected_in[static_cast<std::size_t>(i)]);
  for (int i = 0; i < 6; ++i) BOOST_TEST(grad_w[static_cast<std::size_t>(i)] == expected_w[static_cast<std::size_t>(i)]);
  BOOST_TEST(grad_b[0] == 1.0f);
  BOOST_TEST(grad_b[1] == -2.0f);
}

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_of_equal_logits_is_log_k) {
  const std::vector<float> logits = {3, 3, 3, 3};
  const std::uint8_t label = 2;
  std::vector<float> grad(4);
  double loss = 0;
  std::int64_t correct = 0;
  cnn::softmax_cross_entropy(grad.data(), &loss, &correct, logits.data(), &label, 1, 4, 0.0f);
  BOOST_TEST(loss == std::log(4.0), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(correct == 0);  // argmax picks the first of equal logits, class 0
  BOOST_TEST(grad[2] == 0.25f - 1.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(grad[0] == 0.25f, boost::test_tools::tolerance(1e-6f));
}

// Label smoothing S = 0.2 over K = 4 classes: the targets are 0.05, and 0.85 for the label. Equal logits
// give p = 0.25 everywhere: the loss is still log 4 (sum_k q_k = 1), the gradient p - q.
BOOST_AUTO_TEST_CASE(smoothed_softmax_cross_entropy_of_equal_logits) {
  const std::vector<float> logits = {3, 3, 3, 3};
  const std::uint8_t label = 2;
  std::vector<float> grad(4);
  double loss = 0;
  std::int64_t correct = 0;
  cnn::softmax_cross_entropy(grad.data(), &loss, &correct, logits.data(), &label, 1, 4, 0.2f);
  BOOST_TEST(loss == std::log(4.0), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(grad[2] == 0.25f - 0.85f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(grad[0] == 0.25f - 0.05f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(grad[3] == 0.25f - 0.05f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_survives_huge_logits) {
  const std::vector<float> logits = {1000, 0};
  const std::uint8_t label = 0;
  double loss = 0;
  std::int64_t correct = 0;
  cnn::softmax_cross_entropy(nullptr, &loss, &correct, logits.data(), &label, 1, 2, 0.0f);
  BOOST_TEST(std::isfinite(loss));
  BOOST_TEST(loss < 1e-6);
  BOOST_TEST(correct == 1);
}

BOOST_AUTO_TEST_CASE(gather_normalises_pixels_to_unit_range) {
  const std::vector<std::uint8_t> images = {0, 255, 51, 102};  // two samples of 2 pixels
  const std::int32_t index = 1;
  std::vector<float> out(2);
  cnn::gather_normalize(out.data(), images.data(), &index, 1, 2);
  BOOST_TEST(out[0] == 0.2f, boost::test_tools::tolerance(1e-7f));
  BOOST_TEST(out[1] == 0.4f, boost::test_tools::tolerance(1e-7f));
}
