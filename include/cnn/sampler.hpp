// The global sample order of each epoch, and each rank's share of each global batch.
// The permutation depends only on (seed, epoch, dataset size), never on the number of ranks, so a
// run on N ranks sees exactly the batches a run on 1 rank sees.
#pragma once

#include <cstdint>
#include <vector>

namespace cnn {

class Sampler {
 public:
  Sampler(std::uint64_t seed, std::int64_t dataset_size);

  // Fisher-Yates shuffle of 0..N-1 driven by the counter-based stream keyed by (seed, epoch).
  std::vector<std::int32_t> permutation(std::int64_t epoch) const;

  std::int64_t dataset_size() const { return dataset_size_; }

 private:
  std::uint64_t seed_;
  std::int64_t dataset_size_;
};

// A contiguous range [begin, begin + count).
struct Range {
  std::int64_t begin = 0;
  std::int64_t count = 0;
};

// The global batches of one epoch: every sample once; the last batch may be smaller.
std::int64_t batches_per_epoch(std::int64_t dataset_size, std::int64_t global_batch);
Range global_batch_range(std::int64_t batch_index, std::int64_t dataset_size, std::int64_t global_batch);

// Rank r's contiguous slice of a range of `total` items split over `world` ranks. Sizes differ by at
// most one; gradients are summed and scaled by 1/total, so uneven slices weigh each sample equally.
Range rank_slice(Range whole, int rank, int world);

}  // namespace cnn
