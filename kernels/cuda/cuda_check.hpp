// A check for every CUDA and NCCL call. On failure it throws cnn::Error (exit code 1) naming the
// call, file:line, rank and host, the library's own error name and text, and a HINT where the cure
// is known. Kernel launches are checked right after the launch with CNN_CHECK_LAUNCH().
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cnn/errors.hpp"

#ifdef CNN_HAVE_NCCL
#include <nccl.h>
#endif

namespace cnn::cuda {

inline const char* cuda_error_hint(cudaError_t status) {
  switch (status) {
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
      return "check CUDA_VISIBLE_DEVICES and nvidia-smi";
    case cudaErrorInsufficientDriver:
    case cudaErrorCompatNotSupportedOnDevice:
      return "the NVIDIA driver is older than this CUDA runtime: update the driver or build with an older CUDA";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "this build has no code for this GPU: reconfigure with -DCMAKE_CUDA_ARCHITECTURES=<its compute "
             "capability, e.g. 90 for H100>";
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory: lower --batch or --filters, or look for other processes in nvidia-smi";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
      return "a kernel faulted (this error may come from an earlier launch): rerun under compute-sanitizer";
    default:
      return nullptr;
  }
}

inline std::string cuda_error_text(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

}  // namespace cnn::cuda

#define CNN_CHECK_CUDA(call)                                                                          \
  do {                                                                                                \
    const cudaError_t cnn_cuda_status_ = (call);                                                      \
    if (cnn_cuda_status_ != cudaSuccess)                                                              \
      ::cnn::fail_call("CUDA", #call, ::cnn::cuda::cuda_error_text(cnn_cuda_status_), __FILE__, __LINE__, \
                       ::cnn::cuda::cuda_error_hint(cnn_cuda_status_));                               \
  } while (0)

// After a <<<...>>> launch: catches bad launch configurations at once (faults inside the kernel
// surface at the next checked call on the stream). Names the launcher it sits in.
#define CNN_CHECK_LAUNCH()                                                                            \
  do {                                                                                                \
    const cudaError_t cnn_cuda_status_ = cudaGetLastError();                                          \
    if (cnn_cuda_status_ != cudaSuccess)                                                              \
      ::cnn::fail_call("CUDA", (std::string("kernel launch in ") + __func__).c_str(),                 \
                       ::cnn::cuda::cuda_error_text(cnn_cuda_status_), __FILE__, __LINE__,            \
                       ::cnn::cuda::cuda_error_hint(cnn_cuda_status_));                               \
  } while (0)

#ifdef CNN_HAVE_NCCL
namespace cnn::cuda {
inline const char* nccl_error_hint(ncclResult_t status) {
  switch (status) {
    case ncclUnhandledCudaError:
      return "a CUDA call inside NCCL failed: check nvidia-smi; rerun with NCCL_DEBUG=WARN";
    case ncclSystemError:
    case ncclRemoteError:
      return "a system or network call failed (or another rank died): rerun with NCCL_DEBUG=WARN; "
             "NCCL_SOCKET_IFNAME picks the network interface";
    case ncclInvalidUsage:
      return "ranks disagree on the collective or its size: rerun with NCCL_DEBUG=WARN";
    default:
      return nullptr;
  }
}
}  // namespace cnn::cuda

#define CNN_CHECK_NCCL(call)                                                                          \
  do {                                                                                                \
    const ncclResult_t cnn_nccl_status_ = (call);                                                     \
    if (cnn_nccl_status_ != ncclSuccess)                                                              \
      ::cnn::fail_call("NCCL", #call, ncclGetErrorString(cnn_nccl_status_), __FILE__, __LINE__,       \
                       ::cnn::cuda::nccl_error_hint(cnn_nccl_status_));                               \
  } while (0)
#endif
