// The sampler: a true permutation, reproducible from (seed, epoch), independent of the rank count,
// and rank slices that tile every global batch exactly.
#define BOOST_TEST_MODULE sampler
#include <algorithm>
#include <numeric>

#include "boost_test.hpp"
#include "cnn/sampler.hpp"

BOOST_AUTO_TEST_CASE(permutation_holds_every_index_once) {
  const cnn::Sampler sampler(5, 1000);
  std::vector<std::int32_t> order = sampler.permutation(0);
  std::sort(order.begin(), order.end());
  std::vector<std::int32_t> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  BOOST_TEST(order == expected);
}

BOOST_AUTO_TEST_CASE(permutation_depends_on_seed_and_epoch_only) {
  const cnn::Sampler a(5, 500), b(5, 500), c(6, 500);
  BOOST_TEST(a.permutation(3) == b.permutation(3));
  BOOST_TEST(a.permutation(3) != a.permutation(4));
  BOOST_TEST(a.permutation(3) != c.permutation(3));
  // A shuffle, not the identity, and not a rotation.
  const std::vector<std::int32_t> order = a.permutation(0);
  int fixed = 0;
  for (std::size_t i = 0; i < order.size(); ++i) fixed += order[i] == static_cast<std::int32_t>(i);
  BOOST_TEST(fixed < 10);
}

BOOST_AUTO_TEST_CASE(first_positions_are_roughly_uniform) {
  // Over 2000 epochs, index 0..9 land in position 0 about 200 times each out of 2000 for N=10.
  const cnn::Sampler sampler(11, 10);
  std::vector<int> hits(10, 0);
  for (int epoch = 0; epoch < 2000; ++epoch) ++hits[static_cast<std::size_t>(sampler.permutation(epoch)[0])];
  for (int h : hits) BOOST_TEST((h > 130 && h < 270), "count " << h);
}

BOOST_AUTO_TEST_CASE(batches_cover_the_epoch_with_a_short_last_batch) {
  BOOST_TEST(cnn::batches_per_epoch(60000, 1000) == 60000 / 1000);
  BOOST_TEST(cnn::batches_per_epoch(250, 30) == 9);
  const cnn::Range last = cnn::global_batch_range(8, 250, 30);
  BOOST_TEST(last.begin == 240);
  BOOST_TEST(last.count == 10);
}

BOOST_AUTO_TEST_CASE(rank_slices_tile_the_batch_and_differ_by_at_most_one) {
  for (int world : {1, 2, 3, 4, 7}) {
    for (std::int64_t count : {7, 30, 1000}) {
      if (count < world) continue;
      const cnn::Range batch{120, count};
      std::int64_t next = batch.begin, smallest = count, largest = 0;
      for (int rank = 0; rank < world; ++rank) {
        const cnn::Range slice = cnn::rank_slice(batch, rank, world);
        BOOST_TEST(slice.begin == next);
        next += slice.count;
        smallest = std::min(smallest, slice.count);
        largest = std::max(largest, slice.count);
      }
      BOOST_TEST(next == batch.begin + batch.count);
      BOOST_TEST(largest - smallest <= 1);
    }
  }
}
