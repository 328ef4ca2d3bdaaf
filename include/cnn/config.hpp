// The resolved settings of one run. The CLI fills it, validates it, and rank 0 prints it once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cnn/augment.hpp"
#include "cnn/backend.hpp"
#include "cnn/choices.hpp"
#include "cnn/knobs.hpp"
#include "cnn/lr_schedule.hpp"
#include "cnn/optimizer.hpp"

namespace cnn {

// --resume value that picks the newest valid checkpoint of the run directory.
inline constexpr const char* kResumeAuto = "auto";

// Where the default data set lives once Debian's dataset-fashion-mnist package is installed.
inline constexpr const char* kDefaultFashionDir = "/usr/share/datasets/fashion-mnist";

enum class Command { kTrain, kEval, kPredict, kBench };

// What a --model preset's training recipe (presets.hpp) gave a `train` run: the defaults it applied and
// the options of the recipe that the user gave instead, for the settings block and config.toml.
struct PresetDefaults {
  std::string preset;                 // the preset whose recipe applied; empty: none (a spec, seed, cifar)
  std::vector<std::string> applied;   // "--batch 512", "--nesterov", in the recipe's order
  std::vector<std::string> given;     // "--lr": given on the command line or in --config, which win
  std::vector<std::string> skipped;   // "--nesterov (needs --optimizer momentum)": a default whose
                                      // companion option the user changed
};

struct TrainConfig {
  Command command = Command::kTrain;

  // Data
  std::string data_dir = kDefaultFashionDir;
  DatasetKind dataset = DatasetKind::kFashion;
  std::int64_t train_samples = 0;       // use only the first N training images (0: all)
  std::int64_t test_samples = 0;        // evaluate only the first N test images (0: all)
  DataMode data_mode = DataMode::kAuto;  // stream: hdf5 only (docs/DATA.md)
  std::int64_t stream_window_mb = 64;   // stream mode: memory for the two windows of training images
  std::string h5_images = "/images";    // hdf5: dataset of uint8 images [N,C,H,W]
  std::string h5_labels = "/labels";    // hdf5: dataset of uint8 labels [N]

  // Model and optimisation
  std::string model = "seed";           // a preset (presets.hpp) or a layer spec (include/cnn/network.hpp)
  int filters = 32;
  std::int64_t batch = 100;             // global batch, summed over all ranks
  int epochs = 1;
  double lr = 0.1;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  double momentum = 0.9;
  double beta1 = 0.9;                   // adam
  double beta2 = 0.999;
  double eps = 1e-8;
  LrSchedule lr_schedule;               // --lr-schedule (lr_schedule.hpp); constant by default
  std::int64_t warmup_steps = 0;        // linear warm-up over the first N updates (0: none)
  double weight_decay = 0.0;            // L2 (sgd, momentum, adam) or decoupled (adamw); docs/TRAINING.md
  bool nesterov = false;                // momentum only
  double label_smoothing = 0.0;         // of the training loss, in [0, 1]
  Augment augment;                      // of the training batches (--augment; augment.hpp); none by default
  bool bn_local = false;                // bn: each rank's own batch statistics, not the global batch's
  std::uint64_t seed = 1;

  // Execution
  DeviceChoice device = DeviceChoice::kAuto;  // resolve_config turns auto into cpu or gpu
  std::optional<BackendKind> backend;   // none: chosen from --device by resolve_config, so always set after it
  int threads = 0;                      // threads per rank for `threads`; 0: all cores this rank may use
  OverlapChoice overlap = OverlapChoice::kAuto;  // allreduce under the backward (scaling_advisor.hpp)
  AllreducePath allreduce = AllreducePath::kAuto;  // the gradient path (GPU ranks; CPU ranks: mpi)
  Precision precision = Precision::kFp32;  // the general layers' products; CPU backends: fp32 only
  // --steps-per-launch: the most steps one Backend::train_chunk call runs (chunk_plan.hpp); 0: auto
  // (chunks only where the backend runs them inside one kernel), 1: the one-step loop.
  std::int64_t steps_per_launch = 0;

  // Output
  std::string out_dir;                  // empty: runs/<UTC timestamp> (or the run of --resume PATH); predict: the CSV file
  bool quiet = false;
  std::string trace;                    // Chrome trace file of --trace-steps (docs/LOGS.md); empty: none
  std::string trace_steps = "10:20";    // global steps A:B, B excluded

  // Checkpoints (docs/CHECKPOINT.md). A final checkpoint is always written when training completes.
  int checkpoint_every = 1;             // epochs between checkpoints; 0: only the final one
  std::int64_t checkpoint_every_steps = 0;  // also every N global steps (0: off), for long epochs
  int keep = 3;                         // newest checkpoints kept in RUN_DIR/checkpoints
  std::string resume;                   // "", "auto" (newest valid in --out) or a checkpoint path

  // Reliability (docs/RELIABILITY.md)
  double stall_timeout = 300;           // seconds without progress before the watchdog aborts; 0: off
  NonFinitePolicy on_nonfinite = NonFinitePolicy::kStop;  // non-finite gradients stop the run or drop the step

  // `eval` and `predict`
  std::string checkpoint;               // the checkpoint to evaluate or predict with
  std::string split = "test";           // predict: the split of --data to predict (test | train)

  // --config FILE.toml that gave settings before the command line's ("" none; docs/CONFIG.md). Not a
  // setting of its own: RUN_DIR/config.toml holds what it resolved to.
  std::string config_file;

  // The --model preset's recipe defaults that this run took (train only; presets.hpp). Not options:
  // the values themselves are in the fields above, as if given.
  PresetDefaults preset_defaults;

  // Resolved at start-up, not options
  int world_size = 1;
  // The environment's live tuning knobs (knobs.hpp), read once by main; printed when set.
  Knobs knobs;
};

// One line per setting, "  name: value", for rank 0 to print once.
std::string describe(const TrainConfig& config);

}  // namespace cnn
