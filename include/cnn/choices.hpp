// The options whose value comes from a fixed list, as enums. The command line parses each once
// (src/app/cli.cpp); everything after it compares enums. Each enum has one name function, the text the
// option takes: the settings block, the ranks' launch agreement and the checkpoint's /config print it,
// so those texts stay what they were when the options were strings.
// (The optimizer and the backend have theirs in optimizer.hpp and backend.hpp.)
#pragma once

#include <optional>
#include <string>

namespace cnn {

enum class DatasetKind { kMnist, kFashion, kCifar10, kHdf5 };  // --dataset
enum class DataMode { kAuto, kMemory, kStream };               // --data-mode
enum class DeviceChoice { kCpu, kGpu, kAuto };                 // --device
enum class OverlapChoice { kOn, kOff, kAuto };                 // --overlap
enum class AllreducePath { kNccl, kPeer, kMpi, kAuto };        // --allreduce
enum class NonFinitePolicy { kStop, kSkip };                   // --on-nonfinite
// --precision: what the general layers' matrix products multiply in (docs/PRECISION.md). Always fp32
// accumulation, fp32 master weights, gradients and optimizer state; tf32 and bf16 round each
// product's operands and run on tensor cores (GPU ranks only).
enum class Precision { kFp32, kTf32, kBf16 };

const char* dataset_name(DatasetKind kind);          // mnist | fashion | cifar10 | hdf5
const char* data_mode_name(DataMode mode);           // auto | memory | stream
const char* device_name(DeviceChoice device);        // cpu | gpu | auto
const char* overlap_name(OverlapChoice overlap);     // on | off | auto
const char* allreduce_name(AllreducePath path);      // nccl | peer | mpi | auto
const char* nonfinite_policy_name(NonFinitePolicy policy);  // stop | skip
const char* precision_name(Precision precision);     // fp32 | tf32 | bf16

// The data set a name stands for (load_dataset's callers pass names), or nothing for an unknown name.
std::optional<DatasetKind> dataset_named(const std::string& name);

// "stop" | "skip"; throws UsageError naming --on-nonfinite.
NonFinitePolicy parse_nonfinite_policy(const std::string& text);

}  // namespace cnn
