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

class SliceSums {
 public:
  // Before each training step's parallel region: how many threads take part (those with samples).
  void begin_step(int participants);

  // Called by every participant, each with its own part, the same n and in the same order of calls:
  // values[0 .. n) becomes the sum of the participants' parts, added in participant order. Blocks
  // until every participant has called it.
  void sum(int participant, double* values, std::size_t n);

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  int participants_ = 1;
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
