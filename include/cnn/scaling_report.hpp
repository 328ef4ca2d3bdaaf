// The advisor's piece 5: what its measurements predict for more ranks, the lines rank 0 prints under
// the settings, and the line it appends to RUN_DIR/scaling.log (docs/LOGS.md).
#pragma once

#include <string>
#include <vector>

#include "cnn/choices.hpp"
#include "cnn/gradient_overlap.hpp"

namespace cnn {

// What the advisor measured and chose, for the report and the log.
struct ScalingMeasurements {
  int ranks = 1;
  double compute = 0.0;             // one step's compute, seconds
  long long images_on_rank0 = 0;    // the slice that compute was timed on
  std::vector<std::pair<std::string, double>> paths;  // each timed path and its allreduce seconds
  std::string path;                 // the chosen one
  double allreduce = 0.0;           // the chosen path's allreduce of the whole buffer
  double gradient_bytes = 0.0;
  AllreduceCost cost;
  bool overlap = false;             // the overlapped step was chosen
  std::size_t buckets = 1;          // its buckets (1 without the overlap)
  double overlapped = 0.0;          // a step overlapped (0 with --overlap off)
  double plain = 0.0;               // a step, then the allreduce
  std::string plan_text;            // the buckets and why
  std::string overlap_reason;
  AllreducePath requested_path = AllreducePath::kAuto;  // --allreduce
  OverlapChoice requested_overlap = OverlapChoice::kAuto;  // --overlap
};

// Weak scaling keeps the per-rank compute; the global batch split over twice the ranks halves it.
// The allreduce grows with the ring's traffic per link, hidden as much as now.
struct ScalingPrediction {
  double exposed = 0.0;      // what a step waits beyond its compute (the allreduce not hidden, slower ranks)
  double efficiency = 0.0;   // compute / (compute + exposed) now
  double weak_2n = 0.0;      // the same at twice the ranks, the same batch per rank
  double speedup_2n = 0.0;   // a step's speed-up at twice the ranks, the same global batch
};
ScalingPrediction predict_scaling(const ScalingMeasurements& m);

// The lines printed under the settings ("  scaling advisor: ...", the model, the overlap, the
// prediction and, when more ranks would not pay, a WARNING).
std::string scaling_report(const ScalingMeasurements& m, const ScalingPrediction& p);

// One line per start, like runs.log. Throws IoError when the append fails.
void append_scaling_log(const std::string& run_dir, const ScalingMeasurements& m, const ScalingPrediction& p);

}  // namespace cnn
