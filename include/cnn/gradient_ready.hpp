// What a backend tells, during one training step, about its gradient buffer becoming final piece by
// piece, so that the allreduce of a finished piece can run while the rest of the backward does
// (docs/PERFORMANCE.md, "overlap"). A backend that does not overlap never calls any of this itself:
// Backend::compute_gradients_overlapped's default computes everything, then says so once.
#pragma once

#include <cstdint>

namespace cnn {

// A range of grads() that one point of the backward finishes, and how much backward compute is still
// to come after that point (measured on an earlier step by the backend; 0 when not known). The
// bucket planner (gradient_overlap.hpp) uses the second number to decide which allreduce can hide.
struct GradientReadyPoint {
  std::int64_t offset = 0;
  std::int64_t count = 0;
  double seconds_after = 0.0;
};

class GradientReadyListener {
 public:
  virtual ~GradientReadyListener() = default;
  // [offset, offset + count) of grads() now holds this step's final local sum. A device backend calls
  // this at the point of its stream where that is true (the listener's work is stream-ordered);
  // a host backend calls it from the thread that called compute_gradients_overlapped.
  virtual void gradients_ready(std::int64_t offset, std::int64_t count) = 0;
  // All of grads() is final: reduce what is left, and make grads() hold the sum over ranks before
  // anything queued after this call (host: on return; device: in stream order) reads it.
  virtual void all_gradients_ready() = 0;
  // Called between chunks of the remaining backward, from the OpenMP master thread only, so that a
  // host reduction in flight can progress (MPI moves non-blocking collectives only inside MPI calls).
  virtual void make_progress() {}
  // True when some allreduce starts before all_gradients_ready(). When false, a backend may skip
  // gradients_ready() and compute in its fastest order: the CUDA seed step computes the fc gradients
  // in a pass of their own (fc-first) only when their allreduce starts early.
  virtual bool reduces_early() const { return false; }
  // True when every call above only queues work on the backend's stream (NCCL), so a backend may
  // capture the calls into a CUDA graph and replay them without calling again.
  virtual bool stream_ordered() const { return false; }
  // Changes whenever the listener would queue different work (a new bucket plan): graphs that
  // captured the old calls must be captured again.
  virtual std::uint64_t generation() const { return 0; }
};

}  // namespace cnn
