// The pieces of the scaling advisor (scaling_advisor.hpp), over one harness that times bodies of
// work the same way on every rank. Each piece is collective: every rank calls it at the same point,
// and rank 0's choice holds everywhere (broadcast), so all ranks end on the same path and plan.
//   1. compute         one training step's forward and backward (CalibrationHarness::compute_seconds)
//   2. paths           one allreduce of the real gradient buffer per available path; the fastest
//   3. cost            the chosen path's latency + bytes / bandwidth, from allreduces of three sizes
//   4. overlap         the buckets from the measured ready points; with --overlap auto, on if faster
//   5. prediction      the parallel efficiency now and at twice the ranks (scaling_report.cpp)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/choices.hpp"
#include "cnn/communicator.hpp"
#include "cnn/gradient_overlap.hpp"
#include "cnn/sampler.hpp"

namespace cnn {

// The median of timed samples (the upper middle one of an even count; 0 for none): the advisors' reading
// of repeated timings, which a single late launch cannot move.
double median(std::vector<double> samples);

// The harness: this rank's slice of the run's first batch, on the backend the run trains with.
class CalibrationHarness {
 public:
  CalibrationHarness(const MpiWorld& world, Backend& backend, Range mine, std::int64_t param_count)
      : world_(world), backend_(backend), mine_(mine), param_count_(param_count) {}

  // Collective: one warm-up, then the median over `repeats` on each rank, then the slowest rank's
  // (a step waits for it). The backend is synchronised around each run, after a barrier.
  double time(const std::function<void()>& body, int repeats = kRepeats) const;
  // One training step's compute (forward and backward, no allreduce, no update).
  double compute_seconds() const;
  // Runs compute_gradients_overlapped of this rank's slice with `reducer` once.
  void overlapped_step(OverlapReducer& reducer) const;

  const MpiWorld& world() const { return world_; }
  Backend& backend() const { return backend_; }
  Range mine() const { return mine_; }
  float* grads() const { return backend_.grads(); }
  std::int64_t param_count() const { return param_count_; }
  bool root() const { return world_.rank() == 0; }

  static constexpr int kRepeats = 3;  // timed repeats per measurement, after one warm-up

 private:
  const MpiWorld& world_;
  Backend& backend_;
  Range mine_;
  std::int64_t param_count_;
};

// 2. A path and one allreduce of the whole gradient buffer over it.
struct TimedPath {
  std::string name;  // nccl | peer | mpi
  std::unique_ptr<Communicator> comm;
  double seconds = 0.0;
};
struct TimedPaths {
  std::vector<TimedPath> paths;  // the candidates, timed (the chosen one's comm moved out)
  std::size_t chosen = 0;
  std::unique_ptr<Communicator> comm;  // the chosen path's communicator
  std::string name() const { return paths[chosen].name; }
  double seconds() const { return paths[chosen].seconds; }
};
// The candidates of --allreduce `requested` (CPU ranks: mpi; GPU ranks: the one asked for, or with
// auto every path the build and the machine offer), each timed; `given` is the communicator the run
// made already (reused for its own path). Rank 0's fastest is chosen on every rank. peer_blocks: the
// knob CNN_PEER_BLOCKS, for a peer communicator made here.
TimedPaths time_allreduce_paths(const CalibrationHarness& harness, AllreducePath requested,
                                std::unique_ptr<Communicator> given, std::optional<int> peer_blocks);

// 3. The chosen path's cost over sizes: allreduces of 1/64 and 1/8 of the buffer, plus the whole
// buffer's `full_seconds`, fitted to latency + bytes / bandwidth.
AllreduceCost measure_allreduce_cost(const CalibrationHarness& harness, Communicator& comm, double full_seconds);

// 4. The overlap's buckets and whether to run it.
struct OverlapDecision {
  std::unique_ptr<OverlapReducer> reducer;  // null: the plain step
  double overlapped_seconds = 0.0;          // a step with the reducer (0 when --overlap off)
  double plain_seconds = 0.0;               // a step, then the allreduce
  std::string plan_text;                    // the buckets and why this grouping
  std::string reason;                       // " (auto: faster)", " (auto: not faster, so off)" or ""
};
// `forced_cuts`: the knob CNN_OVERLAP_CUTS (knobs.hpp), rank 0's value. With --overlap off nothing is
// timed and plain_seconds is compute + allreduce.
OverlapDecision choose_overlap(const CalibrationHarness& harness, Communicator& comm, const AllreduceCost& cost,
                               double compute, double allreduce, OverlapChoice overlap,
                               std::optional<std::uint32_t> forced_cuts);

}  // namespace cnn
