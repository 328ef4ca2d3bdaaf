// plan_gemm (implicit_gemm.cuh): the tile and the split of one matrix product. A function of the
// shape, the GPU's multiprocessor count and three tuning knobs only, so the order of every sum is
// fixed. The knobs (CNN_GEMM_THREADS_PER_SM, CNN_GEMM_MAX_SPLITS, CNN_GEMM_MIN_TILES_PER_SPLIT) are
// for kernels/bench/gemm_sweep.sh; their defaults are its measured best. A run resumed with other
// values than it started with sums in another order, so it is not bitwise equal to an
// uninterrupted one.
#include <algorithm>
#include <array>
#include <cstdlib>

#include "implicit_gemm.cuh"

namespace cnn::cuda {
namespace {
// Tuning experiments only (read once per process, so every plan of a run agrees).
int knob(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && std::atoi(value) > 0 ? std::atoi(value) : fallback;
}
}  // namespace

GemmPlan plan_gemm(int m, int n, int k, int multiprocessors, bool allow_split) {
  // Fewest loads per output first; 128x32 for narrow products (conv with few filters).
  constexpr std::array<std::array<int, 2>, 5> kTiles = {{{64, 64}, {128, 32}, {64, 32}, {32, 64}, {32, 32}}};
  static const int kMinTilesPerSplit = knob("CNN_GEMM_MIN_TILES_PER_SPLIT", 4);
  static const int kMaxSplits = knob("CNN_GEMM_MAX_SPLITS", 4096);
  static const int kThreadsPerSM = knob("CNN_GEMM_THREADS_PER_SM", 512);  // 16 warps
  const std::int64_t target_threads = std::int64_t{multiprocessors} * kThreadsPerSM;
  const int k_tiles = std::max(1, static_cast<int>(ceil_div(k, kGemmBK)));
  GemmPlan best;
  std::int64_t best_threads = -1;
  for (const auto& [bm, bn] : kTiles) {
    // No tile more than half padding (the smallest tile is always allowed).
    const bool smallest = bm == 32 && bn == 32;
    if (!smallest && (bm > 32 * ceil_div(m, 32) || bn > 32 * ceil_div(n, 32))) continue;
    GemmPlan plan;
    plan.bm = bm;
    plan.bn = bn;
    plan.m = m;
    plan.n = n;
    plan.k = k;
    const std::int64_t tiles = ceil_div(std::max(m, 1), bm) * ceil_div(std::max(n, 1), bn);
    const std::int64_t threads_per_split = tiles * plan.threads();
    int splits = 1;
    if (allow_split) {
      const int max_splits = std::min(kMaxSplits, std::max(1, k_tiles / kMinTilesPerSplit));
      splits = static_cast<int>(std::clamp<std::int64_t>(ceil_div(target_threads, threads_per_split), 1, max_splits));
    }
    // Even splits of whole k-tiles; recount so that no split is empty.
    const int tiles_per_split = static_cast<int>(ceil_div(k_tiles, splits));
    plan.k_per_split = tiles_per_split * kGemmBK;
    plan.splits = static_cast<int>(ceil_div(k_tiles, tiles_per_split));
    const std::int64_t threads = std::min(target_threads, threads_per_split * plan.splits);
    if (threads >= target_threads) return plan;
    if (threads > best_threads) {
      best = plan;
      best_threads = threads;
    }
  }
  return best;
}

}  // namespace cnn::cuda
