// Chooses the backend named by BackendOptions. The CUDA backend exists only in builds with CUDA;
// asking for it elsewhere is a usage error, never a silent fallback to the CPU.
#include "cnn/backend.hpp"
#include "cnn/cpu_backend.hpp"
#include "cnn/errors.hpp"

#ifdef CNN_HAVE_CUDA
#include "cnn/cuda_backend.hpp"
#endif

namespace cnn {

std::unique_ptr<Backend> make_backend(const BackendOptions& options, const SeedModel& model) {
  if (options.kind == "seq" || options.kind == "threads")
    return make_cpu_backend(model, options.kind, options.threads, options.optimizer);
  if (options.kind == "cuda") {
#ifdef CNN_HAVE_CUDA
    return make_cuda_backend(options, model);
#else
    throw UsageError("--backend cuda: this build of cnn_mpi has no CUDA support (rebuild with CUDA found)");
#endif
  }
  throw UsageError("--backend: unknown backend '" + options.kind + "' (available: seq, threads, cuda)");
}

}  // namespace cnn
