// The scaling advisor: at start-up of a run of 2+ ranks, times one training step and one allreduce of
// the real gradient buffer over each available path (GPU ranks: NCCL and MPI through host memory;
// CPU ranks: MPI), picks the faster unless --allreduce forces one, fits the chosen path's allreduce
// cost (latency + bytes / bandwidth, from allreduces of several sizes), plans the overlap buckets
// (gradient_overlap.hpp), decides --overlap auto by timing overlapped and plain steps, and prints
// the predicted parallel efficiency, with a warning when more ranks would not pay. Rank 0 decides
// every choice and broadcasts it, so all ranks agree. Parameters are not changed; the calibration
// steps' statistics and timings are discarded. The choice goes to RUN_DIR/scaling.log (docs/LOGS.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cnn/backend.hpp"
#include "cnn/communicator.hpp"
#include "cnn/config.hpp"
#include "cnn/gradient_overlap.hpp"
#include "cnn/sampler.hpp"

namespace cnn {

struct GradientExchange {
  std::unique_ptr<Communicator> comm;        // the chosen path
  std::unique_ptr<OverlapReducer> overlap;   // null: the plain step (allreduce after the backward)
  std::string path = "none";                 // nccl | mpi | none (one rank)
  std::string report;                        // what rank 0 printed (empty elsewhere)
};

// Collective. `comm` is the communicator make_communicator chose; `first_batch` the global batch the
// steps are timed on (positions in `permutation`, which becomes the backend's epoch order).
GradientExchange choose_gradient_exchange(const TrainConfig& config, const MpiWorld& world, Backend& backend,
                                          std::unique_ptr<Communicator> comm,
                                          const std::function<Range()>& bind_first_batch,
                                          std::int64_t param_count, const std::string& run_dir);

}  // namespace cnn
