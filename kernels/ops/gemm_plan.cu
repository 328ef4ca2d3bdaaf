// plan_gemm (gemm_plan.hpp): the tile and the split of one matrix product. A function of the
// shape, the precision and the GPU's multiprocessor count only, so the order of every sum is fixed.
#include <algorithm>
#include <array>
#include <iterator>
#include <string>
#include <vector>

#include "ops/gemm_plan.hpp"

namespace cnn::cuda {
namespace {
// The targets of the plan, from the sweep of the cifar preset on nvidia-h100-x1 recorded in
// docs/PERFORMANCE.md ("Plan knobs, measured", kernels/bench/NOTES.md; they were the environment
// knobs CNN_GEMM_THREADS_PER_SM, CNN_GEMM_MAX_SPLITS and CNN_GEMM_MIN_TILES_PER_SPLIT, since
// retired). Changing one changes the order of the sums, so a run resumed across the change is not
// bitwise equal to an uninterrupted one.
// Threads to put on every multiprocessor (16 warps). The sweep tried 384 to 2048: more did not help
// (1024 and up force split-K on conv2's forward, slower).
constexpr int kThreadsPerSM = 512;
// At most this many splits of one product: 4096 beat 512 by 3-4% (conv1's weight gradient, a long
// k, 47 -> 30 us).
constexpr int kMaxSplits = 4096;
// At least this many k-tiles per split. The sweep tried 2 to 32: more did not help.
constexpr int kMinTilesPerSplit = 4;
// plan_weight_gradient's tile, and the k tiles each of its splits must keep (gemm_plan.hpp).
constexpr MmaTile kWeightGradientTile = {64, 64, 2, 2};
constexpr int kWeightGradientTilesPerSplit = 16;
// No tile more than half padding over an m x n product (the smallest, 32x32, is always allowed).
bool at_most_half_padding(const MmaTile& tile, int m, int n) {
  const bool smallest = tile.bm == 32 && tile.bn == 32;
  return smallest || (tile.bm <= 32 * ceil_div(m, 32) && tile.bn <= 32 * ceil_div(n, 32));
}
}  // namespace

std::string GemmPlan::describe() const {
  std::string text = std::string(wgmma ? "wgmma." : tensor_cores() ? "mma." : "fma.") + precision_name(precision) +
                     " " + std::to_string(bm) + "x" + std::to_string(bn);
  if (tensor_cores() && !wgmma && warps_m * warps_n != kMmaThreads / 32)
    text += "/" + std::to_string(warps_m) + "x" + std::to_string(warps_n) + " warps";
  if (splits > 1) text += ", " + std::to_string(splits) + " splits";
  if (tma())
    text += ", TMA boxes of " + std::to_string(box_w) + "x" + std::to_string(box_h) + "x" + std::to_string(box_s) +
            " pixels";
  return text;
}

namespace {
// plan_gemm_tile for a tile of bm x bn (tensor cores: in warps_m x warps_n warps).
GemmPlan plan_with_tile(int m, int n, int k, int multiprocessors, bool allow_split, Precision precision,
                        const MmaTile& tile) {
  GemmPlan plan;
  plan.precision = precision;
  plan.bm = tile.bm;
  plan.bn = tile.bn;
  if (plan.tensor_cores()) {
    plan.warps_m = tile.warps_m;
    plan.warps_n = tile.warps_n;
  }
  plan.m = m;
  plan.n = n;
  plan.k = k;
  const std::int64_t target_threads = std::int64_t{multiprocessors} * kThreadsPerSM;
  const int k_tiles = std::max(1, static_cast<int>(ceil_div(k, plan.k_tile())));
  const std::int64_t threads_per_split =
      ceil_div(std::max(m, 1), plan.bm) * ceil_div(std::max(n, 1), plan.bn) * plan.threads();
  int splits = 1;
  if (allow_split) {
    const int max_splits = std::min(kMaxSplits, std::max(1, k_tiles / kMinTilesPerSplit));
    splits = static_cast<int>(std::clamp<std::int64_t>(ceil_div(target_threads, threads_per_split), 1, max_splits));
  }
  // Even splits of whole k-tiles; recount so that no split is empty.
  const int tiles_per_split = static_cast<int>(ceil_div(k_tiles, splits));
  plan.k_per_split = tiles_per_split * plan.k_tile();
  plan.splits = static_cast<int>(ceil_div(k_tiles, tiles_per_split));
  return plan;
}
}  // namespace

GemmPlan plan_gemm_tile(int m, int n, int k, int multiprocessors, bool allow_split, Precision precision, int bm,
                        int bn) {
  MmaTile tile{bm, bn, 0, 0};
  if (precision != Precision::kFp32)
    for (const MmaTile& listed : kMmaTiles)
      if (listed.bm == bm && listed.bn == bn) {
        tile = listed;
        break;
      }
  return plan_with_tile(m, n, k, multiprocessors, allow_split, precision, tile);
}

GemmPlan plan_gemm_tile(int m, int n, int k, int multiprocessors, bool allow_split, Precision precision,
                        const MmaTile& tile) {
  return plan_with_tile(m, n, k, multiprocessors, allow_split, precision, tile);
}

GemmPlan plan_gemm_tile(int m, int n, int k, int multiprocessors, bool allow_split, Precision precision,
                        const WgmmaTile& tile) {
  // As an mma tile of 16-row warps over all BN columns: the same threads and k tile, so the same split.
  GemmPlan plan =
      plan_with_tile(m, n, k, multiprocessors, allow_split, precision, MmaTile{tile.bm, tile.bn, tile.bm / 16, 1});
  plan.wgmma = true;
  return plan;
}

namespace {
// The first of `tiles` that is at most half padding and fills the multiprocessors (kThreadsPerSM),
// else the one that comes closest (ties to the earlier tile).
GemmPlan first_filling(const std::vector<MmaTile>& tiles, int m, int n, int k, int multiprocessors, bool allow_split,
                       Precision precision) {
  const std::int64_t target_threads = std::int64_t{multiprocessors} * kThreadsPerSM;
  GemmPlan best;
  std::int64_t best_threads = -1;
  for (const MmaTile& tile : tiles) {
    if (!at_most_half_padding(tile, m, n)) continue;
    const GemmPlan plan = plan_with_tile(m, n, k, multiprocessors, allow_split, precision, tile);
    const std::int64_t threads =
        std::min(target_threads, plan.grid().x * std::int64_t{plan.grid().y} * plan.splits * plan.threads());
    if (threads >= target_threads) return plan;
    if (threads > best_threads) {
      best = plan;
      best_threads = threads;
    }
  }
  return best;
}
}  // namespace

GemmPlan plan_gemm(int m, int n, int k, int multiprocessors, bool allow_split, Precision precision) {
  // Fewest loads per output first; 128x32 for narrow products (conv with few filters).
  constexpr std::array<MmaTile, 5> kFp32Tiles = {{{64, 64, 0, 0}, {128, 32, 0, 0}, {64, 32, 0, 0}, {32, 64, 0, 0},
                                                  {32, 32, 0, 0}}};
  std::vector<MmaTile> tiles;
  if (precision == Precision::kFp32)
    tiles.assign(kFp32Tiles.begin(), kFp32Tiles.end());
  else
    tiles.assign(std::begin(kMmaTiles), std::end(kMmaTiles));
  return first_filling(tiles, m, n, k, multiprocessors, allow_split, precision);
}

namespace {
// 128 rows (two warpgroups) by the narrowest instruction N that covers n.
WgmmaTile warpgroup_tile(int n) { return {128, n <= 32 ? 32 : n <= 64 ? 64 : 128}; }
// Threads a plan puts on the GPU, up to the target (kThreadsPerSM a multiprocessor).
std::int64_t filling_threads(const GemmPlan& plan, int multiprocessors) {
  const dim3 grid = plan.grid();
  return std::min(std::int64_t{multiprocessors} * kThreadsPerSM,
                  std::int64_t{grid.x} * grid.y * grid.z * plan.threads());
}
// The warpgroup plan (warpgroup_tile, k split as plan_gemm splits it; unsplit only, unless
// allow_split) where the GPU runs it, m is over 64 rows, and it fills the GPU as well as mma.sync's
// plan `mma`; else `mma`. A warpgroup tile is 128 rows whatever the product, so a small one splits k
// further over fewer blocks (conv3's input gradient at batch 32: 81 blocks against 288).
GemmPlan warpgroup_or(const GemmPlan& mma, int m, int n, int k, int multiprocessors, Precision precision,
                      bool wgmma, bool allow_split) {
  if (!wgmma || precision == Precision::kFp32 || m <= 64) return mma;
  const GemmPlan plan = plan_gemm_tile(m, n, k, multiprocessors, true, precision, warpgroup_tile(n));
  if (!allow_split && plan.splits > 1) return mma;
  return filling_threads(plan, multiprocessors) >= filling_threads(mma, multiprocessors) ? plan : mma;
}
}  // namespace

GemmPlan plan_staged_forward(int m, int n, int k, int multiprocessors, Precision precision, bool wgmma) {
  return warpgroup_or(plan_gemm(m, n, k, multiprocessors, true, precision), m, n, k, multiprocessors, precision,
                      wgmma, false);
}

GemmPlan plan_input_gradient(int m, int n, int k, int multiprocessors, Precision precision, bool wgmma) {
  return warpgroup_or(plan_gemm(m, n, k, multiprocessors, true, precision), m, n, k, multiprocessors, precision,
                      wgmma, true);
}

GemmPlan plan_pixel_boxes(int samples, int height, int width, int n, int k, Precision precision) {
  GemmPlan plan = plan_gemm_tile(samples * height * width, n, k, 1, false, precision, warpgroup_tile(n));
  plan.box_w = std::min(width, plan.bm);
  plan.box_h = std::min(height, plan.bm / plan.box_w);
  plan.box_s = plan.box_h == height ? std::max(1, plan.bm / (plan.box_w * plan.box_h)) : 1;
  plan.boxes = static_cast<int>(ceil_div(width, plan.box_w) * ceil_div(height, plan.box_h) *
                                ceil_div(samples, plan.box_s));
  return plan;
}

GemmPlan plan_pool_windows(int windows, int n, int k, int multiprocessors, Precision precision, bool wgmma) {
  std::vector<MmaTile> tiles;
  for (const MmaTile& tile : kMmaTiles)
    if (tile.holds_pool_windows()) tiles.push_back(tile);
  const int m = 32 * static_cast<int>(ceil_div(windows, 8));
  GemmPlan plan = first_filling(tiles, m, n, k, multiprocessors, false, precision);
  if (plan.m != m) {
    // Every tile is more than half padding (a tiny product): the smallest.
    const auto smallest = std::min_element(tiles.begin(), tiles.end(), [](const MmaTile& a, const MmaTile& b) {
      return a.bm * a.bn < b.bm * b.bn;
    });
    plan = plan_with_tile(m, n, k, multiprocessors, false, precision, *smallest);
  }
  if (!wgmma || precision == Precision::kFp32) return plan;
  const int warpgroup_m = 16 * static_cast<int>(ceil_div(windows, 4));
  const GemmPlan warpgroup = plan_gemm_tile(warpgroup_m, n, k, multiprocessors, false, precision, warpgroup_tile(n));
  return filling_threads(warpgroup, multiprocessors) >= filling_threads(plan, multiprocessors) ? warpgroup : plan;
}

GemmPlan plan_weight_gradient(int m, int n, int k, int multiprocessors, Precision precision) {
  if (precision != Precision::kFp32 && at_most_half_padding(kWeightGradientTile, m, n)) {
    // plan_with_tile splits k to fill the multiprocessors; only a short k (few tiles per split) stops it.
    const GemmPlan plan = plan_with_tile(m, n, k, multiprocessors, true, precision, kWeightGradientTile);
    if (plan.k_per_split >= kWeightGradientTilesPerSplit * plan.k_tile()) return plan;
  }
  return plan_gemm(m, n, k, multiprocessors, true, precision);
}

}  // namespace cnn::cuda
