// Sums over a training step's whole batch slice, for the ops whose forward or backward needs them
// in the middle of the pass (a bn layer's per-channel statistics and gradient sums): the CPU step
// runs a network with bn layers as one micro-batch per thread (cpu_backend.cpp), and each thread's
// op adds its part here. The parts are summed in thread order, so that a result depends on the
// thread count alone and `seq` (one part) and `threads` agree to rounding. Private to src/.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace cnn {

class Communicator;

class SliceSums {
 public:
  // Before each training step's parallel region: how many threads take part (those with samples;
  // participant 0 must be the thread that may call MPI, the OpenMP master), and the communicator
  // whose ranks' sums are added too (bn's global statistics; nullptr: this rank's slice alone).
  void begin_step(int participants, Communicator* ranks);

  // Called by every participant, each with its own part, the same n and in the same order of calls
  // (and, with ranks, on every rank alike): values[0 .. n) becomes the sum of the participants'
  // parts, added in participant order, then over the ranks (an allreduce in double by participant
  // 0). Blocks until every participant has called it.
  void sum(int participant, double* values, std::size_t n);

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  int participants_ = 1;
  Communicator* ranks_ = nullptr;
  int arrived_ = 0;
  std::uint64_t round_ = 0;
  std::vector<const double*> parts_;
  std::vector<double> total_;
};

// Where a thread's ops add their parts: the step's SliceSums and the thread's place among its
// participants. sums == nullptr: outside a training step (no op may ask).
struct SliceShare {
  SliceSums* sums = nullptr;
  int participant = 0;
};

}  // namespace cnn
