// The CPU GEMM's own speed on the products of the cifar preset's conv2 and conv3 as the `threads`
// backend runs them (1x28x28 input, micro-batches of 32 samples, each conv's im2col chunk as
// src/layers/conv.cpp sizes it): the forward, the weight gradient (as col x grad_out^T) and the input
// gradient's columns, one thread, in GFLOP/s. Compare with the one-core peak of
// `cnn_peak --threads 1`, measured in the same session.
// Usage: cnn_gemm_bench [--seconds S]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ops/gemm.hpp"

namespace {

struct Product {  // C[m, n] = A[m, k] * B[k, n]
  const char* name;
  std::int64_t m, n, k;
};

std::vector<float> random_floats(std::int64_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (float& x : v) x = uniform(rng);
  return v;
}

// GFLOP/s of one product: repeated for `seconds`, best of 5 such runs.
double measure(const Product& p, double seconds) {
  const std::vector<float> a = random_floats(p.m * p.k, 1);
  const std::vector<float> b = random_floats(p.k * p.n, 2);
  std::vector<float> c(static_cast<std::size_t>(p.m * p.n), 0.0f);
  auto run = [&] { cnn::gemm::nn(c.data(), a.data(), b.data(), p.m, p.n, p.k, false); };
  run();
  double best = 0.0;
  for (int trial = 0; trial < 5; ++trial) {
    std::int64_t reps = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0.0;
    while (elapsed < seconds) {
      run();
      ++reps;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    best = std::max(best, 2.0 * static_cast<double>(p.m * p.n * p.k) * static_cast<double>(reps) / elapsed / 1e9);
  }
  volatile float sink = c[0];
  (void)sink;
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 0.3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: cnn_gemm_bench [--seconds S]\n");
      return 2;
    }
  }
  if (!(seconds > 0.0)) {
    std::fprintf(stderr, "cnn_gemm_bench: --seconds must be positive\n");
    return 2;
  }
  // conv2: 32 -> 64 channels, 3x3, 13x13 -> 11x11, im2col chunks of 7 samples (847 columns);
  // conv3: 64 -> 64, 3x3, 5x5 -> 3x3, the whole micro-batch of 32 (288 columns). The backward's
  // products run by channel groups of 2^15 column floats (src/layers/conv.cpp): conv2's 4 channels
  // (36 rows), conv3's 12 (108 rows).
  const Product products[] = {
      {"conv2 forward", 64, 847, 288},       {"conv2 weight gradient", 36, 64, 847},
      {"conv2 input gradient", 36, 847, 64},  {"conv3 forward", 64, 288, 576},
      {"conv3 weight gradient", 108, 64, 288}, {"conv3 input gradient", 108, 288, 64},
  };
  for (const Product& p : products)
    std::printf("gemm: %-22s m=%4lld n=%4lld k=%4lld  %7.1f GFLOP/s\n", p.name, static_cast<long long>(p.m), static_cast<long long>(p.n), static_cast<long long>(p.k),
                measure(p, seconds));
  return 0;
}
