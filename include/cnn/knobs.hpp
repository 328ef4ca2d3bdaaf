// Tuning knobs that stay live: environment variables for measurements and A/B runs, not options a
// user needs. main reads them once (read_knobs_from_environment) and hands them on in TrainConfig;
// the settings block prints the ones that are set, so a log tells which figures ran with one.
// Unset, each leaves the default that docs/PERFORMANCE.md chose.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cnn {

struct Knobs {
  // CNN_CUDA_GRAPHS=0: the cuda backend queues each step eagerly instead of replaying a CUDA graph.
  std::optional<bool> cuda_graphs;
  // CNN_OVERLAP_CUTS=MASK: the overlap's bucket grouping, instead of the planner's (0: one bucket;
  // 1: fc first for the seed model). Rank 0's value holds on every rank.
  std::optional<std::uint32_t> overlap_cuts;
  // CNN_PEER_BLOCKS=N: the grid of the peer-memory allreduce kernel (kernels/bench); clamped there
  // to 1..kPeerMaxBlocks. Must be the same on every rank.
  std::optional<int> peer_blocks;
};

// Reads CNN_CUDA_GRAPHS, CNN_OVERLAP_CUTS and CNN_PEER_BLOCKS, parsed as they always were.
Knobs read_knobs_from_environment();

// "  knobs: CNN_CUDA_GRAPHS=0, ...\n" for the knobs that are set; "" when none is (the usual run).
std::string describe(const Knobs& knobs);

}  // namespace cnn
