// The divergence check's scan (include/cnn/nonfinite.hpp) and the layer names of its message
// (divergence.hpp): every position, including block edges, NaN of either sign and the infinities;
// the largest finite values and denormals are finite.
#define BOOST_TEST_MODULE nonfinite
#include "boost_test.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "cnn/divergence.hpp"
#include "cnn/errors.hpp"
#include "cnn/model.hpp"
#include "cnn/nonfinite.hpp"

BOOST_AUTO_TEST_CASE(finite_buffers_give_minus_one) {
  std::vector<float> v(10000, 1.0f);
  v[3] = std::numeric_limits<float>::max();
  v[4] = -std::numeric_limits<float>::max();
  v[5] = std::numeric_limits<float>::denorm_min();
  v[6] = -0.0f;
  BOOST_TEST(cnn::first_nonfinite(v.data(), static_cast<std::int64_t>(v.size())) == -1);
  BOOST_TEST(cnn::first_nonfinite(v.data(), 0) == -1);
}

BOOST_AUTO_TEST_CASE(finds_the_first_at_every_kind_of_position) {
  const float bad[] = {std::nanf(""), -std::nanf(""), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (std::int64_t n : {1, 7, 4095, 4096, 4097, 12289}) {
    for (std::int64_t at : {std::int64_t{0}, n / 2, n - 1}) {
      for (float b : bad) {
        std::vector<float> v(static_cast<std::size_t>(n), 0.5f);
        v[static_cast<std::size_t>(at)] = b;
        if (at + 1 < n) v[static_cast<std::size_t>(n - 1)] = b;  // a later one must not win
        BOOST_TEST(cnn::first_nonfinite(v.data(), n) == at);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(names_the_parameter_view) {
  cnn::SeedModel m;
  m.input = {1, 28, 28};
  m.filters = 4;
  const cnn::ParamLayout layout = m.layout();
  BOOST_TEST(cnn::param_name_at(layout, 0) == "conv1.weight");
  BOOST_TEST(cnn::param_name_at(layout, layout.find("fc.weight").offset) == "fc.weight");
  BOOST_TEST(cnn::param_name_at(layout, layout.total() - 1) == "fc.bias");
  BOOST_TEST(cnn::param_name_at(layout, layout.total()) == "?");
}

BOOST_AUTO_TEST_CASE(policy_names) {
  BOOST_TEST((cnn::parse_nonfinite_policy("stop") == cnn::NonFinitePolicy::kStop));
  BOOST_TEST((cnn::parse_nonfinite_policy("skip") == cnn::NonFinitePolicy::kSkip));
  BOOST_CHECK_THROW(cnn::parse_nonfinite_policy("ignore"), cnn::UsageError);
}
