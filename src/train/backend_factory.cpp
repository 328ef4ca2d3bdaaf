// Chooses the backend named by BackendOptions. The CUDA backend exists only in builds with CUDA;
// asking for it elsewhere is a usage error, never a silent fallback to the CPU.
#include "cnn/backend.hpp"
#include "cnn/cpu_backend.hpp"
#include "cnn/errors.hpp"

#include <stdexcept>
#include <vector>

#ifdef CNN_HAVE_CUDA
#include "cnn/cuda_backend.hpp"
#endif

namespace cnn {

const char* backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kSeq: return "seq";
    case BackendKind::kThreads: return "threads";
    case BackendKind::kCuda: return "cuda";
  }
  return "?";
}

BackendKind parse_backend_kind(const std::string& text) {
  for (BackendKind kind : {BackendKind::kSeq, BackendKind::kThreads, BackendKind::kCuda})
    if (text == backend_kind_name(kind)) return kind;
  throw UsageError("--backend: unknown backend '" + text + "' (available: seq, threads, cuda)");
}

void Backend::set_statistics_communicator(Communicator* ranks) {
  if (ranks != nullptr) throw std::logic_error(name() + ": no layer with global batch statistics runs here");
}

namespace {

// Plain heap memory: all a host backend's copies need.
class HeapFloats final : public HostFloats {
 public:
  explicit HeapFloats(std::int64_t count) : storage_(static_cast<std::size_t>(count)) {
    set(storage_.data(), count);
  }

 private:
  std::vector<float> storage_;
};

}  // namespace

std::unique_ptr<HostFloats> Backend::allocate_host_floats(std::int64_t count) const {
  return std::make_unique<HeapFloats>(count);
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options, const Network& network) {
  if (options.kind == BackendKind::kSeq || options.kind == BackendKind::kThreads) {
    // seq is the reference every precision is measured against: it never rounds to tf32 or bf16.
    if (options.precision != Precision::kFp32)
      throw UsageError(std::string("--precision ") + precision_name(options.precision) + ": the " +
                       backend_kind_name(options.kind) + " backend computes in fp32 only");
    return make_cpu_backend(network, options);
  }
  if (options.kind == BackendKind::kCuda) {
#ifdef CNN_HAVE_CUDA
    return make_cuda_backend(options, network);
#else
    throw UsageError("--backend cuda: this build of cnn_mpi has no CUDA support (rebuild with CUDA found)");
#endif
  }
  throw UsageError("--backend: unknown backend");
}

}  // namespace cnn
