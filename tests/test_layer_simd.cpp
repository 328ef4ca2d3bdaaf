// The CPU layers' vector paths against their definitions, on the shapes that pick each path: conv's
// im2col and col2im (masked rows and col2im's rows in registers for planes at most 16 wide, the
// general loops for wider ones and for padding or stride; src/ops/im2col.cpp) against a direct
// convolution in double, and maxpool's 2x2 rows (planes up to 32 wide) against the scalar loop's
// winners bit for bit, ties and NaN included. Runs in the AVX-512 and the AVX2 tree (tools/test-avx2.sh).
#define BOOST_TEST_MODULE layer_simd
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "boost_test.hpp"
#include "cnn/layer_ops.hpp"
#include "test_util.hpp"

namespace {

using cnn::test::random_vector;

// The worst |got - want| / max(1, |want|) of conv2d_forward and conv2d_backward against the
// definitions of layer_ops.hpp, summed in double.
double conv_error(const cnn::ConvShape& sh, std::int64_t n) {
  const std::vector<float> in = random_vector(static_cast<std::size_t>(n * sh.in_size()), 11, 1.0f);
  const std::vector<float> w = random_vector(static_cast<std::size_t>(sh.weight_size()), 12, 0.5f);
  const std::vector<float> b = random_vector(static_cast<std::size_t>(sh.filters), 13, 0.5f);
  const std::vector<float> gout = random_vector(static_cast<std::size_t>(n * sh.out_size()), 14, 1.0f);
  std::vector<float> out(gout.size()), gin(in.size()), gw(w.size(), 0.0f), gb(b.size(), 0.0f);
  cnn::conv2d_forward(out.data(), in.data(), w.data(), b.data(), n, sh);
  cnn::conv2d_backward(gin.data(), gw.data(), gb.data(), gout.data(), in.data(), w.data(), n, sh);
  std::vector<double> want_out(out.size()), want_gin(in.size(), 0.0), want_gw(w.size(), 0.0), want_gb(b.size(), 0.0);
  const int oh = sh.out_h(), ow = sh.out_w(), k = sh.kernel, c_count = sh.channels;
  for (std::int64_t s = 0; s < n; ++s)
    for (int f = 0; f < sh.filters; ++f)
      for (int y = 0; y < oh; ++y)
        for (int x = 0; x < ow; ++x) {
          const std::int64_t o = ((s * sh.filters + f) * oh + y) * ow + x;
          double sum = b[static_cast<std::size_t>(f)];
          want_gb[static_cast<std::size_t>(f)] += gout[static_cast<std::size_t>(o)];
          for (int c = 0; c < c_count; ++c)
            for (int i = 0; i < k; ++i)
              for (int j = 0; j < k; ++j) {
                const int h = y * sh.stride + i - sh.pad, v = x * sh.stride + j - sh.pad;
                if (h < 0 || h >= sh.height || v < 0 || v >= sh.width) continue;
                const std::size_t ii = static_cast<std::size_t>(((s * c_count + c) * sh.height + h) * sh.width + v);
                const std::size_t wi = static_cast<std::size_t>(((f * c_count + c) * k + i) * k + j);
                sum += static_cast<double>(w[wi]) * in[ii];
                want_gin[ii] += static_cast<double>(w[wi]) * gout[static_cast<std::size_t>(o)];
                want_gw[wi] += static_cast<double>(in[ii]) * gout[static_cast<std::size_t>(o)];
              }
          want_out[static_cast<std::size_t>(o)] = sum;
        }
  double worst = 0.0;
  auto compare = [&](const std::vector<float>& got, const std::vector<double>& want) {
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::fabs(got[i] - want[i]) / std::max(1.0, std::fabs(want[i])));
  };
  compare(out, want_out);
  compare(gin, want_gin);
  compare(gw, want_gw);
  compare(gb, want_gb);
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_CASE(conv_matches_its_definition_on_every_columns_path) {
  // {C, H, W, F, K, stride, pad}: valid and narrow (the cifar preset's conv2 and conv3), valid and
  // wider than 16 outputs, padded and narrow, padded and wider than 16 inputs, strided.
  const std::vector<cnn::ConvShape> shapes = {{3, 13, 13, 5, 3, 1, 0}, {4, 5, 5, 3, 3, 1, 0},  {2, 6, 20, 3, 3, 1, 0},
                                              {3, 9, 13, 4, 3, 1, 1},  {2, 7, 17, 3, 3, 1, 1}, {2, 8, 16, 3, 5, 1, 2},
                                              {3, 7, 6, 4, 3, 2, 1}};
  for (const cnn::ConvShape& sh : shapes) {
    const double worst = conv_error(sh, 3);
    BOOST_TEST_INFO("shape " << sh.channels << "x" << sh.height << "x" << sh.width << " k" << sh.kernel << " s"
                             << sh.stride << " p" << sh.pad);
    BOOST_TEST(worst < 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(a_conv_definition_error_is_caught) {
  // The check above is not vacuous: a 1e-4 change to one input moves the outputs past its bound.
  const cnn::ConvShape sh{3, 13, 13, 5, 3, 1, 0};
  std::vector<float> in = random_vector(static_cast<std::size_t>(sh.in_size()), 11, 1.0f);
  const std::vector<float> w = random_vector(static_cast<std::size_t>(sh.weight_size()), 12, 0.5f);
  const std::vector<float> b(static_cast<std::size_t>(sh.filters), 0.0f);
  std::vector<float> out(static_cast<std::size_t>(sh.out_size())), moved(out.size());
  cnn::conv2d_forward(out.data(), in.data(), w.data(), b.data(), 1, sh);
  in[40] += 1e-2f;
  cnn::conv2d_forward(moved.data(), in.data(), w.data(), b.data(), 1, sh);
  double largest = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) largest = std::max(largest, static_cast<double>(std::fabs(out[i] - moved[i])));
  BOOST_TEST(largest > 1e-5);
}

BOOST_AUTO_TEST_CASE(maxpool_2x2_matches_the_scalar_winners_bit_for_bit) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const int width : {4, 5, 11, 13, 16, 17, 31, 32, 33}) {
    const cnn::PoolShape sh{3, 7, width, 2, 2};
    const std::int64_t n = 2;
    std::vector<float> in = random_vector(static_cast<std::size_t>(n * sh.in_size()), 21, 1.0f);
    // Ties (every fifth value repeats its left neighbour, to a bucket of 8 values) and NaN.
    for (std::size_t i = 0; i < in.size(); ++i) {
      in[i] = std::round(in[i] * 4.0f) / 4.0f;
      if (i % 5 == 1) in[i] = in[i - 1];
      if (i % 23 == 7) in[i] = nan;
    }
    std::vector<float> out(static_cast<std::size_t>(n * sh.out_size()));
    std::vector<std::int32_t> argmax(out.size());
    cnn::maxpool_forward(out.data(), argmax.data(), in.data(), n, sh);
    int mismatches = 0;
    for (std::int64_t pl = 0; pl < n * sh.channels; ++pl)
      for (int py = 0; py < sh.out_h(); ++py)
        for (int px = 0; px < sh.out_w(); ++px) {
          const float* plane = in.data() + pl * sh.height * sh.width;
          std::int32_t best_index = 2 * py * width + 2 * px;
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) {
              const std::int32_t index = (2 * py + a) * width + 2 * px + b;
              if (plane[index] > plane[best_index]) best_index = index;
            }
          const std::size_t o = static_cast<std::size_t>((pl * sh.out_h() + py) * sh.out_w() + px);
          const float want = plane[best_index];
          const bool same = argmax[o] == best_index &&
                            (std::isnan(want) ? std::isnan(out[o]) : std::memcmp(&want, &out[o], sizeof want) == 0);
          if (!same) ++mismatches;
        }
    BOOST_TEST_INFO("width " << width);
    BOOST_TEST(mismatches == 0);
  }
}
