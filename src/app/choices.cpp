#include "cnn/choices.hpp"

#include "cnn/errors.hpp"

namespace cnn {

const char* dataset_name(DatasetKind kind) {
  switch (kind) {
    case DatasetKind::kMnist: return "mnist";
    case DatasetKind::kFashion: return "fashion";
    case DatasetKind::kCifar10: return "cifar10";
    case DatasetKind::kHdf5: return "hdf5";
  }
  return "?";
}

const char* data_mode_name(DataMode mode) {
  switch (mode) {
    case DataMode::kAuto: return "auto";
    case DataMode::kMemory: return "memory";
    case DataMode::kStream: return "stream";
  }
  return "?";
}

const char* device_name(DeviceChoice device) {
  switch (device) {
    case DeviceChoice::kCpu: return "cpu";
    case DeviceChoice::kGpu: return "gpu";
    case DeviceChoice::kAuto: return "auto";
  }
  return "?";
}

const char* overlap_name(OverlapChoice overlap) {
  switch (overlap) {
    case OverlapChoice::kOn: return "on";
    case OverlapChoice::kOff: return "off";
    case OverlapChoice::kAuto: return "auto";
  }
  return "?";
}

const char* allreduce_name(AllreducePath path) {
  switch (path) {
    case AllreducePath::kNccl: return "nccl";
    case AllreducePath::kPeer: return "peer";
    case AllreducePath::kMpi: return "mpi";
    case AllreducePath::kAuto: return "auto";
  }
  return "?";
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
  }
  return "?";
}

const char* nonfinite_policy_name(NonFinitePolicy policy) {
  switch (policy) {
    case NonFinitePolicy::kStop: return "stop";
    case NonFinitePolicy::kSkip: return "skip";
  }
  return "?";
}

std::optional<DatasetKind> dataset_named(const std::string& name) {
  for (DatasetKind kind : {DatasetKind::kMnist, DatasetKind::kFashion, DatasetKind::kCifar10, DatasetKind::kHdf5})
    if (name == dataset_name(kind)) return kind;
  return std::nullopt;
}

NonFinitePolicy parse_nonfinite_policy(const std::string& text) {
  for (NonFinitePolicy policy : {NonFinitePolicy::kStop, NonFinitePolicy::kSkip})
    if (text == nonfinite_policy_name(policy)) return policy;
  throw UsageError("--on-nonfinite: unknown policy '" + text + "' (available: stop, skip)");
}

}  // namespace cnn
