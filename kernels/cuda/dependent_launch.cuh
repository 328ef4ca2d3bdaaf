// Programmatic dependent launch (sm_90 and later): a kernel launched with launch_dependent() is set
// up on the GPU as soon as every block of the kernel before it on the stream has exited, instead of
// after that kernel's completion has been signalled back through the launch path. A step of the
// cifar preset is 25-35 mostly short kernels in a row, so that hand-over is paid 25-35 times a step
// (at batch 32 it saved 13 us of a 144 us step on nvidia-h100-x1; docs/PERFORMANCE.md).
//
// The contract, which every kernel launched through launch_dependent() keeps:
//   its first statement is start_after_previous_kernel(),
// before it reads or writes any global memory. griddepcontrol.wait returns only once every grid it
// depends on has completed and its memory is visible, so the kernel sees exactly what a plain launch
// would: results are bitwise the same as without the feature (on a GPU before sm_90 the launch
// attribute is left out and the instructions compile to nothing). It is always on where the device
// supports it: the A/B runs that settled it are recorded in docs/PERFORMANCE.md.
// Completion is transitive: the previous kernel itself waited before it ended, so everything earlier
// on the stream is complete too. Work that is not a kernel (copies, memsets, event waits, allocation
// nodes, NCCL) keeps its ordinary full dependency.
//
// No kernel triggers its dependents early (griddepcontrol.launch_dependents): the trigger is then
// implicit, when every block of the grid has exited, so the next grid is set up during the earlier
// one's memory flush and completion, and its blocks never hold SM slots while the earlier grid still
// runs. A trigger at block start, tried first, made the cifar preset slower (batch 128: 121 -> 129
// ms/epoch on nvidia-h100-x1), presumably because the waiting blocks took slots that the side
// stream's kernels needed (inferred, not profiled). Measured in docs/PERFORMANCE.md.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda/cuda_check.hpp"

namespace cnn::cuda {

// True when launches on the current device may carry the programmatic-serialization attribute: the
// device is sm_90 or later.
bool dependent_launch_enabled();

#ifdef __CUDACC__
__device__ __forceinline__ void start_after_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), allowed to start early (see above). The
// arguments are converted to the kernel's parameter types as in a <<<>>> launch. As after a <<<>>>
// launch, the caller checks with CNN_CHECK_LAUNCH(), which names the launcher: a failed launch is
// also the runtime's last error.
//
// The launch also names the stream's priority. A stream's priority orders plain launches, but by the
// CUDA documentation a kernel captured into a CUDA graph runs at the priority of the stream the graph
// is launched into, unless its node carries its own and the graph is instantiated with
// cudaGraphInstantiateFlagUseNodePriority (step_graph.cu does): so a high-priority side stream (the
// layer ops' weight gradients) stays high priority inside the step's graph.
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (dependent_launch_enabled()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  int priority = 0;
  if (cudaStreamGetPriority(stream, &priority) == cudaSuccess && priority != 0) {
    attributes[count].id = cudaLaunchAttributePriority;
    attributes[count].val.priority = priority;
    ++count;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}
#endif

}  // namespace cnn::cuda
