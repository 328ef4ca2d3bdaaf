// Setting a training run up, once, before its loop (trainer.cpp): the data read on every rank and
// agreed on, the network, the resume point, the run directory claimed, the backend with its data
// bound and its starting parameters, and the gradient exchange the scaling advisor chose. Rank 0
// then prints the settings. Every step is collective where it says so, in the same order on every rank.
#pragma once

#include <future>
#include <memory>
#include <optional>
#include <string>

#include "cnn/backend.hpp"
#include "cnn/checkpointer.hpp"
#include "cnn/chunk_plan.hpp"
#include "cnn/communicator.hpp"
#include "cnn/config.hpp"
#include "cnn/gradient_overlap.hpp"
#include "cnn/lr_schedule.hpp"
#include "cnn/network.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/resume.hpp"
#include "cnn/run_directory.hpp"
#include "cnn/run_log.hpp"
#include "cnn/training_data.hpp"

namespace cnn {

struct TrainingRun {
  std::unique_ptr<TrainingData> data;
  Network network;
  OptimizerSettings optimizer;
  std::optional<LearningRate> learning_rate;  // the lr of each global step (set with the data)
  ResumePoint resume;                      // where the loop starts (all zero when fresh)
  std::unique_ptr<RunDirectory> run_dir;   // rank 0 owns the directory (a lock) while this lives
  std::unique_ptr<RunLog> log;
  // Declared before the backend and the reducer, so destroyed after them: ncclCommDestroy waits until
  // every CUDA graph that captured a collective of the communicator (the overlapped step's) is gone.
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<OverlapReducer> overlap;  // null: the plain step
  ChunkPlan chunks;                         // --steps-per-launch as this run takes it (one step per call by default)
  // Last, so destroyed first: a checkpoint write still in flight when the run ends with an error
  // finishes while the backend (whose host memory its snapshot may be) and the run directory's lock live.
  std::unique_ptr<Checkpointer> checkpointer;
};

// Collective. Null when --resume found the run complete already (said once on rank 0). The backend
// holds the epoch order of the first epoch to run and the data of its first step. `data`: the data
// load main started early, or an empty future to load here.
std::unique_ptr<TrainingRun> set_up_run(const TrainConfig& config, const MpiWorld& world,
                                        std::future<std::unique_ptr<TrainingData>> data);

}  // namespace cnn
