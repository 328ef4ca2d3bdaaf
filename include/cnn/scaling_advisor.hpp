// The scaling advisor: at start-up of a run of 2+ ranks, times one training step and one allreduce of
// the real gradient buffer over each available path (GPU ranks: NCCL, peer memory and MPI through host
// memory; CPU ranks: MPI), picks the faster unless --allreduce forces one, fits the chosen path's
// allreduce cost (latency + bytes / bandwidth, from allreduces of several sizes), plans the overlap
// buckets (gradient_overlap.hpp), decides --overlap auto by timing overlapped and plain steps, and
// prints the predicted parallel efficiency, with a warning when more ranks would not pay. Rank 0
// decides every choice and broadcasts it, so all ranks agree. Parameters are not changed; the
// calibration steps' statistics and timings are discarded. The choice goes to RUN_DIR/scaling.log
// (docs/LOGS.md). The pieces are in exchange_calibration.hpp and scaling_report.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cnn/backend.hpp"
#include "cnn/choices.hpp"
#include "cnn/communicator.hpp"
#include "cnn/gradient_overlap.hpp"
#include "cnn/sampler.hpp"

namespace cnn {

struct GradientExchange {
  std::unique_ptr<Communicator> comm;        // the chosen path
  std::unique_ptr<OverlapReducer> overlap;   // null: the plain step (allreduce after the backward)
  std::string path = "none";                 // nccl | peer | mpi | none (one rank)
  std::string report;                        // what rank 0 prints (empty elsewhere)
};

// What the advisor reads of the options.
struct ExchangeOptions {
  AllreducePath allreduce = AllreducePath::kAuto;  // --allreduce
  OverlapChoice overlap = OverlapChoice::kAuto;    // --overlap
  std::optional<std::uint32_t> overlap_cuts;       // the knob CNN_OVERLAP_CUTS (knobs.hpp)
  std::optional<int> peer_blocks;                  // the knob CNN_PEER_BLOCKS (knobs.hpp)
  std::string run_dir;                             // --out: scaling.log goes there
};

// Collective. `comm` is the communicator make_communicator chose; the steps are timed on
// `first_batch`, the run's first global batch, which the backend holds already (bound by the trainer).
GradientExchange choose_gradient_exchange(const ExchangeOptions& options, const MpiWorld& world, Backend& backend,
                                          std::unique_ptr<Communicator> comm, Range first_batch,
                                          std::int64_t param_count);

}  // namespace cnn
