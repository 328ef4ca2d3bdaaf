// X. The persistent seed kernel's gradient exchange (2+ ranks, one GPU each, on one node): each
// step's gradient summed over the ranks INSIDE the kernel, between the reduction over blocks (D) and
// the update (E), through the peer area (dist/peer_area.hpp) by remote stores, as the peer allreduce
// does (dist/peer_allreduce.cuh): a store to another GPU is posted and goes on, and every load is local.
//
// Block b of every rank handles the same values, so block b only ever waits for block b of the other
// ranks, and no block waits for another of its own grid:
//   - its own columns' fc weight gradients (final after C, in its shared memory),
//   - its share of the values the blocks share (every conv gradient value and the fc biases): the
//     items it has just reduced in D (block_shared_items), so that no grid barrier comes between,
//   - block 0: the host's stop word, read at the step's start, so that every rank stops at the same step.
// One-shot: block b stores its values into every rank's inbox from this rank (its columns as soon as
// C has them, the rest after D), meets block b of every rank (flag barrier), then sums its values
// over its inboxes in rank order 0, 1, ..., n-1. Every
// rank sums the same inboxes in the same order, so every rank holds the same bits, and the sum is
// checked for non-finite values there (a local non-finite value survives the sum, so the check sees
// it as the one-step loop does after its allreduce). The summed values go where D and C left the
// local ones: the flat gradient buffer and, for the fc columns, the shared memory the update reads.
//
// Each block counts its exchanges (its epoch) in the peer area's flags, which the kernel reads at its
// start and writes back at its end; the two staging slots alternate by epoch. A block stores into a
// slot of another rank again only two steps later, after the barrier of the step in between, which
// that rank's block reached only after it had read the slot (peer_barrier begins with __syncthreads).
#pragma once

#include "dist/peer_allreduce.cuh"
#include "ops/seed_persistent_phases.cuh"

namespace cnn::cuda::persistent {

// Where a value sits in an inbox: column q's 10 fc weight gradients at q*10 (cell-major ownership
// order), then the shared values in D's item order (filter f's 9 taps and bias at columns*10 +
// f*10, then the 10 fc biases), then the stop word. seed_exchange_floats() on the host.
struct ExchangeLayout {
  std::int64_t shared_base;
  std::int64_t stop_at;
};
__device__ __forceinline__ ExchangeLayout exchange_layout(const Shape& s) {
  ExchangeLayout x;
  x.shared_base = s.columns * kO;
  x.stop_at = x.shared_base + shared_item_count(s);
  return x;
}

// The flat gradient index of shared item e (D's order).
__device__ __forceinline__ std::int64_t shared_item_index(const SeedParamOffsets& at, const Shape& s, int e) {
  const int conv_items = s.filters * kConvValues;
  if (e < conv_items) return conv_index(at, e / kConvValues, e % kConvValues);
  return at.fc_bias + (e - conv_items);
}

// This block's epoch at the launch's start, read by every thread before any writes it back at the
// launch's end (after the last grid barrier).
__device__ inline unsigned int exchange_epoch_at_start(const PeerView& v) {
  return v.ranks > 1 ? __ldcg(&peer_flags(v, v.rank)->epoch[blockIdx.x]) : 0u;
}
__device__ inline void keep_exchange_epoch(const PeerView& v, unsigned int epoch) {
  if (v.ranks > 1 && threadIdx.x == 0) peer_flags(v, v.rank)->epoch[blockIdx.x] = epoch;
}

// 1a. Right after C, before the grid barrier that D waits for: this block's own columns' fc weight
// gradients (nearly all the floats a step exchanges), final in its shared memory, into every rank's
// inbox from this rank (its own too), so that their transfer overlaps the barrier and D. `epoch`:
// the exchange's, this block's count with it included.
__device__ inline void send_owned_columns(const SeedPersistentArgs& a, const Ownership& own, const float* smem,
                                          const SharedLayout& l, unsigned int epoch) {
  const PeerView& v = a.peers;
  const float* sums = smem + l.sums;  // C's per-column sums: the fc weight gradients at kConvValues + o
  const int fc_values = own.count * kO;
  const std::int64_t fc_base = own.first * kO;
  for (int q = 0; q < v.ranks; ++q) {
    float* inbox = peer_inbox(v, q, v.rank, epoch);
    for (int e = threadIdx.x; e < fc_values; e += kThreads) {
      const int u = e / kO;
      inbox[fc_base + e] = sums[u * kColumnSums + kConvValues + (e - u * kO)];
    }
  }
}

// 1b-3. The rest of the exchange with epoch `epoch`, right after this block's D (send_owned_columns
// came before). host_stop: block 0 thread 0's read of the host's stop word (0 elsewhere).
__device__ inline void exchange_phase(const SeedPersistentArgs& a, const Shape& s, const Ownership& own, float* smem,
                                      const SharedLayout& l, unsigned int epoch, int host_stop) {
  const PeerView& v = a.peers;
  const ExchangeLayout x = exchange_layout(s);
  float* sums = smem + l.sums;
  const int fc_values = own.count * kO;
  const std::int64_t fc_base = own.first * kO;
  const SharedItems shared = block_shared_items(s);
  const bool stop_keeper = blockIdx.x == 0 && threadIdx.x == 0;

  __syncthreads();  // this block's D wrote its shared items (read back from L2 below)
  // 1b. Its share of the shared values, and the stop word, into every rank's inbox from this rank.
  for (int q = 0; q < v.ranks; ++q) {
    float* inbox = peer_inbox(v, q, v.rank, epoch);
    for (int e = shared.begin + static_cast<int>(threadIdx.x); e < shared.end; e += kThreads)
      inbox[x.shared_base + e] = __ldcg(a.grads + shared_item_index(a.at, s, e));
    if (stop_keeper) inbox[x.stop_at] = host_stop != 0 ? 1.0f : 0.0f;
  }
  // 2. Block b of every rank has stored its values here.
  peer_barrier(v, 0, epoch);
  // 3. Each value summed over the inboxes in rank order (read from L2: another GPU wrote them).
  const auto summed = [&](std::int64_t at) {
    float total = __ldcg(peer_inbox(v, v.rank, 0, epoch) + at);
    for (int q = 1; q < v.ranks; ++q) total += __ldcg(peer_inbox(v, v.rank, q, epoch) + at);
    return total;
  };
  for (int e = threadIdx.x; e < fc_values; e += kThreads) {
    const int u = e / kO;
    const int o = e - u * kO;
    const float total = summed(fc_base + e);
    sums[u * kColumnSums + kConvValues + o] = total;
    const std::int64_t index = fc_index(a.at, s, own.first + u, o);
    a.grads[index] = total;
    flag_nonfinite(a.verdict, total, index);
  }
  for (int e = shared.begin + static_cast<int>(threadIdx.x); e < shared.end; e += kThreads) {
    const float total = summed(x.shared_base + e);
    const std::int64_t index = shared_item_index(a.at, s, e);
    a.grads[index] = total;
    flag_nonfinite(a.verdict, total, index);
  }
  if (stop_keeper && summed(x.stop_at) != 0.0f) *a.stop_request = 1;
}

}  // namespace cnn::cuda::persistent
