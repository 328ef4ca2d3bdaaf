// Names of the checkpoint file's groups and attributes, shared by the writer, the reader and the run
// directory. Private to src/; the layout is documented in docs/CHECKPOINT.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cnn/model.hpp"

namespace cnn::schema {

inline constexpr const char* kConfigGroup = "/config";
inline constexpr const char* kModelGroup = "/model";
inline constexpr const char* kOptimizerGroup = "/optimizer";
inline constexpr const char* kProgressGroup = "/progress";
inline constexpr const char* kRngGroup = "/rng";
inline constexpr const char* kMetricsGroup = "/metrics";
inline constexpr const char* kStateGroup = "/state";             // only for networks with bn layers
inline constexpr const char* kBnRunningPath = "/state/bn_running";

inline constexpr const char* kChecksumAttr = "checksum";
inline constexpr const char* kRunIdAttr = "run_id";  // on /, since version 2

// The generators that turn /rng's seed into the sample order and the initial weights. A checkpoint
// made by a build with other generators cannot be continued bit for bit, so the reader rejects it.
inline constexpr const char* kSamplerName = "fisher-yates/mix64";
inline constexpr const char* kInitName = "uniform-fan-in/mix64";

// A checkpoint is first written as NAME + kTmpSuffix; the rename makes it visible only when complete.
inline constexpr const char* kTmpSuffix = ".tmp";

// The optimizer state tensors stored per parameter, in the order they lie in
// CheckpointState::optimizer_state: sgd -> {}, momentum -> {"velocity"}, adam -> {"m", "v"}.
// Throws std::invalid_argument for any other name.
std::vector<std::string> state_names(const std::string& optimizer);

// FNV-1a 64 of `count` floats as little-endian bytes: the "checksum" attribute of every dataset.
std::uint64_t checksum(const float* values, std::int64_t count);

// "/model/conv1/weight" and "/optimizer/conv1/weight/velocity".
std::string param_path(const ParamView& view);
std::string state_path(const ParamView& view, const std::string& state);

}  // namespace cnn::schema
