// HDF5 checkpoints (format version 2) and the run directory that holds them.
//
// Layout (docs/CHECKPOINT.md):
//   bytes 0..511             the HDF5 user block: "cnn_mpi-checkpoint v2 crc32=<8 hex> bytes=<n>\n", zero-padded;
//                            zlib's crc32 and the length of every byte after it, checked before HDF5 parses any
//   /                        attrs format="cnn_mpi-checkpoint", version=2, created, program_version, run_id
//   /config                  attrs model, spec, filters, input_shape, classes, global_batch, lr, optimizer,
//                            momentum, beta1, beta2, eps, seed, dataset, dataset_digest, train_samples, epochs
//                            (optional, for files written before they existed: epochs, the --epochs the
//                            run aimed at; spec, derived from model + filters when absent; beta1, beta2, eps;
//                            lr_schedule, warmup_steps, total_steps, weight_decay, nesterov, label_smoothing,
//                            augment, bn_local)
//   /model/<layer>/<param>   float32, natural shape (e.g. /model/conv1/weight [d,1,3,3])
//   /optimizer/<layer>/<param>/<state>   (momentum: "velocity"; adam: "m", "v"); attr step on /optimizer
//   /state/bn_running        float32 [n]: the bn layers' running means and variances (Network::state_count,
//                            layer order); only for networks with bn layers; attr count on /state
//   /progress                attrs epoch, step_in_epoch, global_step, samples_seen, world_size_at_save,
//                            epoch_loss_sum, epoch_correct, epoch_samples (optional: the unfinished epoch's
//                            train loss sum, correct count and samples over all ranks, so its logged loss is exact)
//   /rng                     attrs seed, sampler ("fisher-yates/mix64"), init ("uniform-fan-in/mix64")
//   /metrics                 attrs train_loss, test_loss, test_accuracy
// Every dataset carries a "checksum" attribute (FNV-1a 64 of its raw bytes), verified on load.
// Version-1 files (no user block) still load, verified by those dataset checksums only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cnn/model.hpp"
#include "cnn/network.hpp"

namespace cnn {

inline constexpr const char* kCheckpointFormat = "cnn_mpi-checkpoint";
inline constexpr int kCheckpointVersion = 2;        // what the writer writes
inline constexpr int kOldestCheckpointVersion = 1;  // the oldest the reader still loads

struct CheckpointConfig {
  std::string model;            // --model as given: a preset ("seed", "cifar") or a layer spec
  std::string spec;             // the canonical layer spec (Network::spec); what resume compares
  int filters = 0;
  TensorShape input;
  int classes = 0;
  std::int64_t global_batch = 0;
  double lr = 0.0;
  std::string optimizer;        // "sgd" | "momentum" | "adam"
  double momentum = 0.0;
  double beta1 = 0.9;           // adam
  double beta2 = 0.999;
  double eps = 1e-8;
  std::uint64_t seed = 0;
  std::string dataset;          // "fashion"
  std::uint64_t dataset_digest = 0;
  std::int64_t train_samples = 0;  // training images per epoch actually used
  std::int64_t epochs = 0;         // --epochs of the run that wrote it (0: not recorded)
  std::string precision = "fp32";  // --precision (files written before it existed: fp32)
  // The options of docs/TRAINING.md; files written before they existed hold none of them and resume
  // with these defaults, which are what those runs used.
  std::string lr_schedule = "constant";  // lr_schedule_text() of --lr-schedule
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;     // epochs * steps per epoch of the writing run (0: not recorded);
                                    // what cosine and onecycle anneal over
  double weight_decay = 0.0;
  bool nesterov = false;
  double label_smoothing = 0.0;
  std::string augment = "none";     // augment_text() of --augment (files written before it existed: none)
  bool bn_local = false;            // --bn-local (absent in older files: global, what they could not differ in)
  // The step path the run took (chunk_plan.hpp), so that a resume of --steps-per-launch auto takes it
  // again rather than measure anew (the two sum in other orders): "persistent" (steps inside the
  // persistent kernel), "one-step" (one step per call, or the default loop's chunks: the same bits),
  // or "" (not recorded: files written before it, and checkpoints of runs that never planned steps).
  std::string step_path;
};

struct CheckpointProgress {
  std::int64_t epoch = 0;          // epochs completed
  std::int64_t step_in_epoch = 0;  // steps completed within the current (unfinished) epoch; 0 at a boundary
  std::int64_t global_step = 0;
  std::int64_t samples_seen = 0;
  int world_size_at_save = 1;
  // Train stats of the unfinished epoch so far, summed over ranks (all 0 at an epoch boundary).
  double epoch_loss_sum = 0.0;
  std::int64_t epoch_correct = 0;
  std::int64_t epoch_samples = 0;
};

struct CheckpointMetrics {
  double train_loss = 0.0;
  double test_loss = 0.0;
  double test_accuracy = 0.0;
};

// Everything in a checkpoint but its tensors.
struct CheckpointMeta {
  CheckpointConfig config;
  CheckpointProgress progress;
  CheckpointMetrics metrics;
  std::int64_t optimizer_step = 0;
  std::string run_id;  // the run that wrote it ("" in version-1 files)
};

struct CheckpointState : CheckpointMeta {
  std::vector<float> params;           // flat, laid out by the model's ParamLayout
  std::vector<float> optimizer_state;  // flat, same layout, optimizer_state_per_param() copies
  std::vector<float> bn_running;       // Network::state_count floats; empty without bn layers
  // Set by the reader: false for a version-1 file, whose bytes were checked by the dataset checksums
  // only, not whole. The callers say so in one line (eval, --resume).
  bool verified_whole = true;
};

// Floats the writer reads where they already are: a CheckpointState's vectors, or the asynchronous
// checkpoint's snapshot in the backend's host memory (pinned for cuda; checkpointer.hpp), which is
// thus written without another copy.
struct FloatView {
  const float* data = nullptr;
  std::size_t size = 0;
  bool empty() const { return size == 0; }
};
struct CheckpointTensors {
  FloatView params;           // as CheckpointState's
  FloatView optimizer_state;
  FloatView bn_running;
  static CheckpointTensors of(const CheckpointState& state) {
    return {{state.params.data(), state.params.size()},
            {state.optimizer_state.data(), state.optimizer_state.size()},
            {state.bn_running.data(), state.bn_running.size()}};
  }
};

// Writes `path` atomically: the HDF5 file is built in memory, sealed (the version-2 header), written
// to path + ".tmp" with plain write(2) calls, fsynced, renamed, and the directory fsynced.
// Throws IoError naming the file on any failure (a full disk: "... No space left on device"); the
// previous file at `path` is untouched then and the .tmp is removed. Safe on any thread: libhdf5 is
// only entered under its process-wide lock (src/io/hdf5_util.hpp), the file is written outside it.
void write_checkpoint(const std::string& path, const CheckpointMeta& meta, const CheckpointTensors& tensors,
                      const ParamLayout& layout);
inline void write_checkpoint(const std::string& path, const CheckpointState& state, const ParamLayout& layout) {
  write_checkpoint(path, state, CheckpointTensors::of(state), layout);
}

// Reads and validates. The file (a regular file only: a FIFO or device is refused without blocking)
// is read whole with plain reads and its header, length and crc32 checked before libhdf5 sees the
// bytes, from memory. Then: format name and version, every expected dataset present with the
// layout's shape, every checksum, and every /progress and /metrics value in range for the file's own
// /config. Throws InputError (content) or IoError (cannot open) naming the file, one line.
// The layout comes from the model the caller builds from the checkpoint's /config.
//
// CheckpointReader reads and verifies the file once: its config first (to build the model and check
// a resume against it), then the whole state in that model's layout. The two free functions each
// open the file anew.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const CheckpointConfig& config() const { return config_; }
  CheckpointState read(const ParamLayout& layout) const;

 private:
  struct Opened;  // libhdf5's handle on the verified bytes (src/io/checkpoint_read.cpp)
  std::unique_ptr<Opened> opened_;
  CheckpointConfig config_;
};

CheckpointConfig read_checkpoint_config(const std::string& path);
CheckpointState read_checkpoint(const std::string& path, const ParamLayout& layout);

// Rewrites the version-2 header of `path` in place to match the bytes after it. For tests and tools
// that edit a checkpoint with libhdf5 or h5py, which cannot keep the digest (tests/ckpt_seal.py does
// the same in Python). Throws IoError or InputError (not a version-2 checkpoint).
void reseal_checkpoint(const std::string& path);

// The checkpoints of one run directory: RUN_DIR/checkpoints/ckpt-e<epoch>-s<global_step>.h5, plus a
// `latest` file holding the newest one's name.
class CheckpointDir {
 public:
  explicit CheckpointDir(std::string run_dir);

  // Creates the directory if needed and proves it writable (creates and removes a probe file).
  // Removes stale *.h5.tmp left by a killed writer. Throws IoError.
  void prepare() const;

  // Writes a new checkpoint, updates `latest`, then deletes the oldest beyond `keep` (keep >= 1).
  // Returns the path written. The pruning only ever follows a complete new file, so the newest valid
  // checkpoint is never deleted. Any thread (the asynchronous checkpoint's writer): one save at a time.
  std::string save(const CheckpointMeta& meta, const CheckpointTensors& tensors, const ParamLayout& layout,
                   int keep) const;
  std::string save(const CheckpointState& state, const ParamLayout& layout, int keep) const {
    return save(state, CheckpointTensors::of(state), layout, keep);
  }
  // The path save() writes for `progress`.
  std::string path_for(const CheckpointProgress& progress) const;

  // Checkpoints present, newest first (by global_step in the name, then mtime).
  std::vector<std::string> list() const;

  const std::string& dir() const { return dir_; }

 private:
  std::string run_dir_;
  std::string dir_;
};

}  // namespace cnn
