// A Backend owns the model's flat buffers (parameters, gradients, optimizer state) in its own memory
// (host for `seq` and `threads`, device for `cuda`) and computes, for a set of samples, the SUM of
// their loss gradients. The trainer never touches the math; it only moves through epochs and steps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cnn/augment.hpp"
#include "cnn/choices.hpp"
#include "cnn/dataset.hpp"
#include "cnn/dropout_mask.hpp"
#include "cnn/gradient_ready.hpp"
#include "cnn/network.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/phase_times.hpp"
#include "cnn/step_chunk.hpp"

// The CUDA runtime's stream type is a pointer to this (cudaStream_t); declared here so that host code
// can pass a device backend's stream on without including a CUDA header.
struct CUstream_st;

namespace cnn {

class Communicator;
class MpiWorld;

enum class MemorySpace { kHost, kDevice };

// Sums over samples; divide by count for means.
struct BatchStats {
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  std::int64_t count = 0;

  BatchStats& operator+=(const BatchStats& other) {
    loss_sum += other.loss_sum;
    correct += other.correct;
    count += other.count;
    return *this;
  }
};

// Where a device backend runs: its GPU, and the stream every one of its operations is ordered on, so
// that a collective queued there needs no other synchronisation with the steps before and after it
// (the device communicators, kernels/dist/device_communicator.cu).
struct DeviceQueue {
  int device = 0;
  CUstream_st* stream = nullptr;  // a cudaStream_t
  std::int64_t floats = 0;        // of params() and grads(): what a communicator must be able to reduce
};

// The randomness of the training steps that follow: dropout's masks (dropout_mask.hpp) are drawn
// from the run's seed, the global step, and each sample's index in the global batch, which is its
// index into the epoch's order (compute_gradients' `first` onwards) minus batch_begin, where the
// global batch begins there. So a rank's slice draws what the same samples draw on one rank.
struct StepRandomness {
  std::uint64_t seed = 0;
  std::int64_t global_step = 0;
  std::int64_t batch_begin = 0;
};

// Host memory that a backend copies its flat buffers into at full speed: page-locked for the cuda
// backend (a device-to-host copy into pageable memory goes through a driver staging buffer at a
// fraction of the bandwidth), ordinary heap memory for the host backends. The asynchronous
// checkpoint's snapshot (checkpointer.hpp) lives in one, reused from checkpoint to checkpoint.
class HostFloats {
 public:
  virtual ~HostFloats() = default;
  HostFloats(const HostFloats&) = delete;
  HostFloats& operator=(const HostFloats&) = delete;
  float* data() const { return data_; }
  std::int64_t size() const { return size_; }

 protected:
  HostFloats() = default;
  void set(float* data, std::int64_t size) {
    data_ = data;
    size_ = size;
  }

 private:
  float* data_ = nullptr;
  std::int64_t size_ = 0;
};

// The lengths, in floats, of the flat buffers a checkpoint holds (download_params,
// download_optimizer_state, download_state).
struct FlatSizes {
  std::int64_t params = 0;
  std::int64_t optimizer_state = 0;
  std::int64_t state = 0;
  std::int64_t total() const { return params + optimizer_state + state; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Set by the trainer before each step's compute_gradients (the default: seed 0, step 0, batch at 0).
  void set_step_randomness(const StepRandomness& randomness) {
    randomness_ = randomness;
    step_key_ = dropout_step_key(randomness.seed, randomness.global_step);
  }

  virtual std::string name() const = 0;
  // What the backend runs on, for the start-up line ("2 threads", "NVIDIA H100 80GB HBM3 (GPU 0)").
  virtual std::string device_description() const = 0;
  virtual MemorySpace memory_space() const = 0;
  // The GPU and stream of a device backend (memory_space() kDevice); nullptr for a host backend.
  virtual const DeviceQueue* device_queue() const { return nullptr; }

  // Keeps (or uploads) both splits as uint8. The backend may keep references. Called again in stream
  // mode (docs/DATA.md) for each window of samples, after the steps that used the previous one.
  virtual void bind_data(const Dataset& train, const Dataset& test) = 0;

  // Host copies of the flat buffers, for initialisation, broadcast and checkpoints.
  virtual void upload_params(const std::vector<float>& host) = 0;
  virtual std::vector<float> download_params() = 0;
  virtual void upload_optimizer_state(const std::vector<float>& host) = 0;
  virtual std::vector<float> download_optimizer_state() = 0;
  // The network's state (Network::state_count floats: the bn layers' running statistics), neither
  // parameters nor optimizer state: updated by training forwards, read by evaluation, checkpointed.
  virtual void upload_state(const std::vector<float>& host) = 0;
  virtual std::vector<float> download_state() = 0;

  // The asynchronous checkpoint's snapshot: what it costs the training path. flat_sizes() gives the
  // three buffers' lengths; download_all copies them, after the work queued before it, to `out`
  // (flat_sizes().total() floats): the parameters, then the optimizer state, then the state, back to
  // back, complete when it returns. One copy per buffer, straight into `out` (for cuda, one
  // device-to-host copy each into memory from allocate_host_floats, which is pinned).
  virtual FlatSizes flat_sizes() const = 0;
  virtual void download_all(float* out) = 0;
  // `count` floats of host memory download_all copies into fastest (HostFloats above).
  virtual std::unique_ptr<HostFloats> allocate_host_floats(std::int64_t count) const;
  // bn's global statistics: the communicator whose ranks' per-channel sums each training step adds
  // to this rank's, in the middle of its forward and backward (nullptr, the default: the rank's own
  // slice, --bn-local). Every rank must then run the same steps. A backend that cannot refuses.
  virtual void set_statistics_communicator(Communicator* ranks);
  // How those sums travel, for the settings block (the cuda backend: inside the step's CUDA graph, or
  // through the host in eager steps); empty when there is nothing to add (the CPU backends, no ranks).
  virtual std::string statistics_exchange() const { return ""; }

  // The flat buffers in memory_space(), for the communicator.
  virtual float* params() = 0;
  virtual float* grads() = 0;

  // The global order of this epoch; steps below index into it. (The cuda backend uploads it once
  // per epoch, so nothing crosses PCIe per step.)
  virtual void begin_epoch(const std::vector<std::int32_t>& permutation) = 0;

  // grads() = SUM over samples permutation[first .. first+count) of d(loss)/d(params).
  // count may be 0 (a rank with an empty slice), which writes zeros.
  // The loss and correct count are added to the train stats (read with take_train_stats()).
  virtual void compute_gradients(std::int64_t first, std::int64_t count) = 0;

  // As compute_gradients, telling `listener` as soon as a range of grads() is final so that its
  // allreduce runs under the rest of the backward (gradient_ready.hpp). Must end with
  // listener.all_gradients_ready(). The default overlaps nothing, so every backend works unchanged.
  virtual void compute_gradients_overlapped(std::int64_t first, std::int64_t count, GradientReadyListener& listener) {
    compute_gradients(first, count);
    listener.all_gradients_ready();
  }
  // The ranges compute_gradients_overlapped reports, in the order it finishes them; empty when it
  // reports none (the default). Read after a step, so seconds_after can be measured ones.
  virtual std::vector<GradientReadyPoint> gradient_ready_points() { return {}; }
  // Index of the first NaN or infinity in grads(), or -1 when all are finite: the divergence check
  // (src/train/divergence.cpp). A device backend reads back one integer.
  virtual std::int64_t first_nonfinite_grad() = 0;
  // The same check without a wait, for backends where the wait costs (a device sync per step):
  // enqueues the check of grads() and makes the next apply_update leave parameters and optimizer
  // state untouched when it finds a non-finite value. Returns false when the backend has no such
  // check (the CPU backends, whose check is a cheap scan); src/train/divergence.cpp then waits as before.
  virtual bool enqueue_nonfinite_check() { return false; }
  // What the last enqueued check found (index, or -1); waits for that check only.
  virtual std::int64_t enqueued_nonfinite_result() { return -1; }
  // Test hook CNN_TEST_NAN_AT (src/train/divergence.cpp): overwrites one gradient, in grads()'s memory.
  virtual void set_grad_for_test(std::int64_t index, float value) { grads()[index] = value; }

  // params -= optimizer step using grads() * grad_scale.
  virtual void apply_update(const OptimizerSettings& settings, float grad_scale) = 0;

  // Several whole steps of this rank in one call, each one's gradient, divergence check and update
  // included (step_chunk.hpp). The default runs them one by one through compute_gradients,
  // first_nonfinite_grad and apply_update: the same bits as the trainer's one-step loop of a single
  // rank. The cuda backend runs the seed model's steps inside one persistent kernel instead, where
  // persistent_steps_unsupported says "", and there, after prepare_chunk_exchange, the steps of
  // several ranks with the gradients summed over the ranks inside the kernel. The train stats of the
  // steps run are added as compute_gradients adds them; grads() holds the last step run's gradient.
  virtual StepChunkResult train_chunk(const StepChunk& chunk);
  // Runs of 2+ ranks: sets up what train_chunk needs to sum each step's gradient over `world` inside
  // the chunk. Collective. "" when it does so from now on, else why not (the default: it cannot; such
  // a run takes one step per call, with the exchange between).
  virtual std::string prepare_chunk_exchange(const MpiWorld& /*world*/) {
    return "the " + name() + " backend exchanges gradients between steps only";
  }
  // Why train_chunk does not run `batch`-sample steps inside one kernel launch here, or "" when it does.
  virtual std::string persistent_steps_unsupported(std::int64_t /*batch*/) const {
    return "the " + name() + " backend runs one step per kernel launch";
  }
  // A host word train_chunk reads once per step: non-zero stops the chunk at the next step boundary.
  // The trainer points the stop signals' handler at it (signals.hpp). The backend never clears it (a
  // stop ends the run). The default is a word of this object; the cuda backend's is mapped into the GPU.
  virtual volatile int* chunk_stop_word() { return &stop_word_; }

  // Train stats accumulated since the last call (a device sync for cuda).
  virtual BatchStats take_train_stats() = 0;

  // Loss and correct count over test samples [first, first + count).
  virtual BatchStats evaluate(std::int64_t first, std::int64_t count) = 0;
  // The same, also writing each sample's logits (the last fc layer's outputs, before the softmax) to
  // host memory: [count, classes] floats at `logits`. What `cnn_mpi predict` turns into probabilities.
  virtual BatchStats evaluate_logits(std::int64_t first, std::int64_t count, float* logits) = 0;

  // How each op's convolutions and matrix products run for a slice of n samples, one line per op that
  // has any ("conv3x3:64+relu: forward mma.bf16 128x64; ..."), for the settings block. Empty: the
  // backend's kernels are described by its name (the CPU backends, fp32 only).
  virtual std::vector<std::string> implementation_lines(std::int64_t /*n*/) const { return {}; }

  // Waits for queued work (cuda); timing brackets use it so phases are measured honestly.
  virtual void synchronize() {}

  // Seconds per phase (data, h2d, forward, backward, update) since the last call. The cuda backend
  // measures with CUDA events, so reading it synchronises.
  virtual PhaseTimes take_phase_times() { return {}; }

 protected:
  // Where the samples from index `first` of the epoch's order on stand in the current step.
  MaskOrigin mask_origin(std::int64_t first) const { return MaskOrigin{step_key_, first - randomness_.batch_begin}; }

 private:
  StepRandomness randomness_;
  std::uint64_t step_key_ = dropout_step_key(0, 0);
  volatile int stop_word_ = 0;  // chunk_stop_word()'s default
};

enum class BackendKind { kSeq, kThreads, kCuda };

// "seq", "threads", "cuda".
const char* backend_kind_name(BackendKind kind);
// The --backend value; anything else is a UsageError naming the choices.
BackendKind parse_backend_kind(const std::string& text);

struct BackendOptions {
  BackendKind kind = BackendKind::kSeq;
  int threads = 1;                  // for `threads` (`seq` is one thread by definition)
  int local_rank = 0;               // for `cuda`: device = local_rank % visible devices
  OptimizerKind optimizer = OptimizerKind::kSgd;
  Precision precision = Precision::kFp32;  // cuda only: the layer products' precision (choices.hpp)
  float label_smoothing = 0.0f;     // of the training loss (--label-smoothing; ops.hpp); evaluation has none
  Augment augment;                  // of the training batches' gather (--augment; augment.hpp); evaluation has none
  bool cuda_graphs = true;          // cuda: replay each step as one CUDA graph (the knob CNN_CUDA_GRAPHS=0: eager, for A/B)
};

// One backend per device, running network as the ops plan_ops picks for it (op_plan.hpp): seq and
// threads on the CPU (seq unfused, the reference), cuda on the GPU.
std::unique_ptr<Backend> make_backend(const BackendOptions& options, const Network& network);

}  // namespace cnn
