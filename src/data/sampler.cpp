#include "cnn/sampler.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "cnn/rng.hpp"

namespace cnn {

Sampler::Sampler(std::uint64_t seed, std::int64_t dataset_size) : seed_(seed), dataset_size_(dataset_size) {}

std::vector<std::int32_t> Sampler::permutation(std::int64_t epoch) const {
  std::vector<std::int32_t> order(static_cast<std::size_t>(dataset_size_));
  std::iota(order.begin(), order.end(), 0);
  const std::uint64_t key = stream_key(seed_, Stream::kSampler, static_cast<std::uint64_t>(epoch));
  // Fisher-Yates from the back: swap position i with a uniform j in [0, i]. Draw i uses counter i.
  for (std::int64_t i = dataset_size_ - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(draw_below(key, static_cast<std::uint64_t>(i),
                                                        static_cast<std::uint64_t>(i + 1)));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

std::int64_t batches_per_epoch(std::int64_t dataset_size, std::int64_t global_batch) {
  return (dataset_size + global_batch - 1) / global_batch;
}

Range global_batch_range(std::int64_t batch_index, std::int64_t dataset_size, std::int64_t global_batch) {
  Range range;
  range.begin = batch_index * global_batch;
  range.count = std::min(global_batch, dataset_size - range.begin);
  return range;
}

Range rank_slice(Range whole, int rank, int world) {
  const std::int64_t begin = whole.count * rank / world;
  const std::int64_t end = whole.count * (rank + 1) / world;
  return {whole.begin + begin, end - begin};
}

}  // namespace cnn
