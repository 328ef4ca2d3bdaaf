// The configuration of a seed-model momentum checkpoint that the checkpoint tests build by hand
// (test_checkpoint_dir, test_checkpoint_writer, test_resume): Fashion-MNIST's 1x28x28 and 10
// classes, global batch 100, lr 0.1, momentum 0.9.
#pragma once

#include <cstdint>

#include "cnn/checkpoint.hpp"
#include "cnn/presets.hpp"

namespace cnn::test {

inline CheckpointConfig seed_momentum_config(int filters, std::uint64_t seed, std::uint64_t dataset_digest,
                                             std::int64_t train_samples) {
  CheckpointConfig c;
  c.model = "seed";
  c.spec = preset_spec("seed", filters, 10);
  c.filters = filters;
  c.input = {1, 28, 28};
  c.classes = 10;
  c.global_batch = 100;
  c.lr = 0.1;
  c.optimizer = "momentum";
  c.momentum = 0.9;
  c.seed = seed;
  c.dataset = "fashion";
  c.dataset_digest = dataset_digest;
  c.train_samples = train_samples;
  return c;
}

}  // namespace cnn::test
