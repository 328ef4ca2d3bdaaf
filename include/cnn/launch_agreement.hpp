// Ranks agree or stop: every rank must run the same training. A launch that starts ranks with
// different options (an MPMD command line, a wrapper script that differs per node, a stale binary on
// one node) would otherwise pair mismatched collectives: a silent hang, or MPI_ERR_TRUNCATE.
//
// At start-up each rank lists what must agree, as (setting, value) pairs in a fixed order, and
// compares them with rank 0's. What may differ per node is left out: --threads, node-local data
// paths, --out (rank 0 alone writes), --stall-timeout, --quiet. The data set is compared by identity
// (sizes, shape, classes and the digest of labels and shape), after each rank has read it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cnn/communicator.hpp"
#include "cnn/config.hpp"
#include "cnn/training_data.hpp"

namespace cnn {

using LaunchSettings = std::vector<std::pair<std::string, std::string>>;

// The resolved options that every rank must share, with the build's version and source id.
LaunchSettings settings_that_must_agree(const TrainConfig& config);

// The identity of the data set this rank read.
LaunchSettings data_identity(const TrainingData& data);

// Collective (every rank calls it at the same point). Returns when all ranks hold rank 0's list.
// Otherwise rank 0 prints one line naming the first differing setting, rank 0's value and the lowest
// rank that differs with its value, and every rank throws AlreadyReported (exit 2).
void agree_on_settings(const MpiWorld& world, const LaunchSettings& mine);

}  // namespace cnn
