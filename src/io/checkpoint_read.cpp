// Reads and validates the HDF5 checkpoint (versions 1 and 2; layout in docs/CHECKPOINT.md). The file is
// read whole and its digest checked before libhdf5 parses anything (src/io/checkpoint_image.cpp); then
// every value is checked against the layout and against the file's own /config, so that nothing a
// damaged or edited file holds reaches the trainer (a negative step, an epoch past the run, ...).
#include <climits>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/checkpoint_image.hpp"
#include "io/checkpoint_schema.hpp"
#include "cnn/checkpoint.hpp"
#include "cnn/augment.hpp"
#include "cnn/errors.hpp"
#include "cnn/lr_schedule.hpp"
#include "cnn/network.hpp"
#include "io/hdf5_util.hpp"

namespace cnn {
namespace {

using schema::checksum;
using schema::param_path;
using schema::state_path;

constexpr std::size_t kInputShapeRank = 3;  // channels, height, width
constexpr std::size_t kImageIncrement = std::size_t{1} << 16;  // read-only: the driver never grows it

struct OpenCheckpoint {
  h5::FileContext file;
  h5::Handle fid;
  int version = 0;
};

// libhdf5 opens the verified bytes from memory, never the path again: what it parses is what was checked.
OpenCheckpoint open_checkpoint(const std::string& path) {
  ckpt::VerifiedImage image = ckpt::read_verified(path);
  OpenCheckpoint opened{h5::FileContext(path, h5::Mode::kRead), {}, image.version};
  const h5::FileContext& file = opened.file;
  {
    const h5::Handle access = file.own(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate", "");
    file.check(H5Pset_fapl_core(access.get(), kImageIncrement, 0), "H5Pset_fapl_core", "");
    // Copies the bytes into the property list (and H5Fopen again into the driver): ours can go first.
    file.check(H5Pset_file_image(access.get(), image.bytes.data(), image.bytes.size()), "H5Pset_file_image", "");
    ckpt::Bytes().swap(image.bytes);
    opened.fid = file.own(H5Fopen(ckpt::kMemoryFileName, H5F_ACC_RDONLY, access.get()), H5Fclose, "H5Fopen", "");
  }
  const h5::Node root{file.own(H5Gopen2(opened.fid.get(), "/", H5P_DEFAULT), H5Gclose, "H5Gopen2", "/"), "/"};
  if (file.check(H5Aexists(root.id(), "format"), "H5Aexists", "/") == 0) {
    file.fail("not a cnn_mpi checkpoint (no 'format' attribute on /)");
  }
  const std::string format = h5::read_string_attr(file, root, "format");
  if (format != kCheckpointFormat) {
    file.fail("not a cnn_mpi checkpoint (format is '" + format + "', expected '" + kCheckpointFormat + "')");
  }
  const std::int64_t version = h5::read_int64_attr(file, root, "version");
  if (version < kOldestCheckpointVersion || version > kCheckpointVersion) {
    file.fail("unsupported checkpoint version " + std::to_string(version) + " (" + ckpt::supported_versions() + ")");
  }
  // A version-2 header over a file that says version 1, or a version-2 file without its header: the
  // header is what makes the file whole, so the two must agree.
  if (version != opened.version) {
    file.fail("the version attribute says " + std::to_string(version) + " but the file " +
              (opened.version == 1 ? "has no version-2 header" : "has a version-" + std::to_string(opened.version) +
                                                                     " header") +
              " (the file is damaged or was edited)");
  }
  return opened;
}

int read_int_attr(const h5::FileContext& file, const h5::Node& node, const char* name) {
  const std::int64_t value = h5::read_int64_attr(file, node, name);
  if (value < INT_MIN || value > INT_MAX) {
    file.fail("attribute '" + std::string(name) + "' on " + node.path + " is out of range: " + std::to_string(value));
  }
  return static_cast<int>(value);
}

// Attributes added after version 1 first shipped are optional, so older version-1 files still load.
bool has_attr(const h5::FileContext& file, const h5::Node& node, const char* name) {
  return file.check(H5Aexists(node.id(), name), "H5Aexists", node.path) > 0;
}

// The model is built from /config before any tensor is read, so its sizes must be sane first: a
// damaged or hostile file must give one line, not a failed allocation of a negative or huge layout.
// The bounds are those of the command line (--filters) and of the data formats (uint8 labels).
constexpr int kMaxFilters = 4096;
constexpr int kMaxClasses = 256;
constexpr int kMaxChannels = 64;
constexpr int kMaxExtent = 4096;
constexpr std::int64_t kMaxParams = std::int64_t{1} << 31;

void check_config_ranges(const h5::FileContext& file, const CheckpointConfig& c) {
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) file.fail("/config " + what);
  };
  require(c.filters >= 1 && c.filters <= kMaxFilters,
          "filters " + std::to_string(c.filters) + " is out of range (1.." + std::to_string(kMaxFilters) + ")");
  require(c.classes >= 1 && c.classes <= kMaxClasses,
          "classes " + std::to_string(c.classes) + " is out of range (1.." + std::to_string(kMaxClasses) + ")");
  require(c.input.channels <= kMaxChannels && c.input.height <= kMaxExtent && c.input.width <= kMaxExtent,
          "input_shape " + std::to_string(c.input.channels) + "x" + std::to_string(c.input.height) + "x" +
              std::to_string(c.input.width) + " is out of range");
  const std::int64_t fc_weights = static_cast<std::int64_t>(c.filters) * (c.input.height / 2) * (c.input.width / 2) * c.classes;
  require(fc_weights < kMaxParams, "describes a model of more than 2^31 parameters");
  require(c.global_batch >= 1, "global_batch " + std::to_string(c.global_batch) + " is not positive");
  require(c.train_samples >= 1, "train_samples " + std::to_string(c.train_samples) + " is not positive");
}

// The options of docs/TRAINING.md, each optional (files written before it existed resume with the
// defaults those runs used: a constant lr, no decay, no nesterov, no smoothing), each range-checked.
void read_training_options(const h5::FileContext& file, const h5::Node& group, CheckpointConfig& c) {
  if (has_attr(file, group, "lr_schedule")) {
    c.lr_schedule = h5::read_string_attr(file, group, "lr_schedule");
    try {
      parse_lr_schedule(c.lr_schedule);
    } catch (const UsageError&) {
      file.fail("/config lr_schedule '" + c.lr_schedule + "' is not a schedule this build knows");
    }
  }
  if (has_attr(file, group, "augment")) {
    c.augment = h5::read_string_attr(file, group, "augment");
    try {
      parse_augment(c.augment);
    } catch (const UsageError&) {
      file.fail("/config augment '" + c.augment + "' is not an augmentation this build knows");
    }
  }
  if (has_attr(file, group, "warmup_steps")) c.warmup_steps = h5::read_int64_attr(file, group, "warmup_steps");
  if (has_attr(file, group, "total_steps")) c.total_steps = h5::read_int64_attr(file, group, "total_steps");
  if (has_attr(file, group, "weight_decay")) c.weight_decay = h5::read_double_attr(file, group, "weight_decay");
  if (has_attr(file, group, "label_smoothing"))
    c.label_smoothing = h5::read_double_attr(file, group, "label_smoothing");
  std::int64_t nesterov = 0;
  if (has_attr(file, group, "nesterov")) nesterov = h5::read_int64_attr(file, group, "nesterov");
  if (nesterov != 0 && nesterov != 1) file.fail("/config nesterov " + std::to_string(nesterov) + " is not 0 or 1");
  c.nesterov = nesterov == 1;
  std::int64_t bn_local = 0;
  if (has_attr(file, group, "bn_local")) bn_local = h5::read_int64_attr(file, group, "bn_local");
  if (bn_local != 0 && bn_local != 1) file.fail("/config bn_local " + std::to_string(bn_local) + " is not 0 or 1");
  c.bn_local = bn_local == 1;
  if (has_attr(file, group, "step_path")) {
    c.step_path = h5::read_string_attr(file, group, "step_path");
    if (c.step_path != "persistent" && c.step_path != "one-step")
      file.fail("/config step_path '" + c.step_path + "' is not persistent or one-step");
  }
  if (c.warmup_steps < 0) file.fail("/config warmup_steps " + std::to_string(c.warmup_steps) + " is negative");
  if (c.total_steps < 0) file.fail("/config total_steps " + std::to_string(c.total_steps) + " is negative");
  const auto shown = [](double value) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", value);
    return std::string(text);
  };
  if (!(std::isfinite(c.weight_decay) && c.weight_decay >= 0.0))
    file.fail("/config weight_decay " + shown(c.weight_decay) + " is not 0 or positive");
  if (!(c.label_smoothing >= 0.0 && c.label_smoothing <= 1.0))
    file.fail("/config label_smoothing " + shown(c.label_smoothing) + " is not in [0, 1]");
}

CheckpointConfig read_config(const h5::FileContext& file, hid_t fid) {
  const h5::Node group = h5::open_group(file, fid, schema::kConfigGroup);
  CheckpointConfig c;
  c.model = h5::read_string_attr(file, group, "model");
  c.filters = read_int_attr(file, group, "filters");
  const std::vector<std::int64_t> input = h5::read_int64_array_attr(file, group, "input_shape", kInputShapeRank);
  for (const std::int64_t extent : input) {
    if (extent <= 0 || extent > INT_MAX) file.fail("/config input_shape " + h5::shape_text(input) + " is invalid");
  }
  c.input = TensorShape{static_cast<int>(input[0]), static_cast<int>(input[1]), static_cast<int>(input[2])};
  c.classes = read_int_attr(file, group, "classes");
  c.global_batch = h5::read_int64_attr(file, group, "global_batch");
  c.lr = h5::read_double_attr(file, group, "lr");
  c.optimizer = h5::read_string_attr(file, group, "optimizer");
  c.momentum = h5::read_double_attr(file, group, "momentum");
  c.seed = h5::read_uint64_attr(file, group, "seed");
  c.dataset = h5::read_string_attr(file, group, "dataset");
  c.dataset_digest = h5::read_uint64_attr(file, group, "dataset_digest");
  c.train_samples = h5::read_int64_attr(file, group, "train_samples");
  if (has_attr(file, group, "epochs")) c.epochs = h5::read_int64_attr(file, group, "epochs");
  if (has_attr(file, group, "precision")) {
    c.precision = h5::read_string_attr(file, group, "precision");
    if (c.precision != "fp32" && c.precision != "tf32" && c.precision != "bf16")
      file.fail("/config precision '" + c.precision + "' is not fp32, tf32 or bf16");
  }
  if (has_attr(file, group, "beta1")) c.beta1 = h5::read_double_attr(file, group, "beta1");
  if (has_attr(file, group, "beta2")) c.beta2 = h5::read_double_attr(file, group, "beta2");
  if (has_attr(file, group, "eps")) c.eps = h5::read_double_attr(file, group, "eps");
  read_training_options(file, group, c);
  if (has_attr(file, group, "spec")) {
    c.spec = h5::read_string_attr(file, group, "spec");
  } else {
    // Written before specs were stored, when the seed model was the only one.
    c.spec = preset_spec(c.model, c.filters, c.classes);
    if (c.spec.empty()) file.fail("/config has no 'spec' and model '" + c.model + "' is not a preset");
  }
  check_config_ranges(file, c);
  return c;
}

void read_checksummed(const h5::FileContext& file, hid_t fid, const std::string& path, const ParamView& view,
                      float* buffer) {
  float* data = buffer + view.offset;
  const h5::Node dataset = h5::read_float_dataset(file, fid, path, view.shape, data);
  if (h5::read_uint64_attr(file, dataset, schema::kChecksumAttr) != checksum(data, view.size)) {
    file.fail("checksum mismatch in " + path + " (file corrupted?)");
  }
}

void read_rng(const h5::FileContext& file, hid_t fid) {
  const h5::Node rng = h5::open_group(file, fid, schema::kRngGroup);
  const std::pair<const char*, const char*> generators[] = {{"sampler", schema::kSamplerName},
                                                            {"init", schema::kInitName}};
  for (const auto& [name, expected] : generators) {
    const std::string found = h5::read_string_attr(file, rng, name);
    if (found != expected) {
      file.fail(std::string("/rng ") + name + " is '" + found + "', this build implements '" + expected +
                "' (the run cannot be continued bit for bit)");
    }
  }
}

// The largest epoch a run can reach: --epochs is an int.
constexpr std::int64_t kMaxEpoch = INT_MAX;

std::string num(std::int64_t value) { return std::to_string(value); }

std::string real(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

// Every /progress, /optimizer and /metrics value against the file's own /config, as the trainer writes
// them (src/train/trainer.cpp): S = ceil(train_samples / global_batch) steps per epoch, only full batches
// before the epoch's last step, one optimizer update per step.
void check_progress(const h5::FileContext& file, CheckpointState& state, int version) {
  const CheckpointConfig& c = state.config;
  CheckpointProgress& p = state.progress;
  const std::int64_t batch = c.global_batch;  // >= 1, train_samples >= 1: check_config_ranges
  const std::int64_t steps = c.train_samples / batch + (c.train_samples % batch != 0);
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) file.fail(what);
  };
  require(p.step_in_epoch >= 0 && p.step_in_epoch < steps,
          "/progress step_in_epoch " + num(p.step_in_epoch) + " is out of range (0.." + num(steps - 1) + " for " +
              num(c.train_samples) + " images in batches of " + num(batch) + ")");
  require(p.epoch >= 0 && p.epoch <= kMaxEpoch,
          "/progress epoch " + num(p.epoch) + " is out of range (0.." + num(kMaxEpoch) + ")");
  std::int64_t step = 0;
  std::int64_t samples = 0;
  const bool step_overflows = __builtin_mul_overflow(p.epoch, steps, &step) ||
                              __builtin_add_overflow(step, p.step_in_epoch, &step);
  const bool samples_overflow = __builtin_mul_overflow(p.epoch, c.train_samples, &samples) ||
                                __builtin_add_overflow(samples, p.step_in_epoch * batch, &samples);
  require(!step_overflows && !samples_overflow,
          "/progress epoch " + num(p.epoch) + " of " + num(c.train_samples) + " images overflows the counters");
  require(p.global_step == step, "/progress global_step " + num(p.global_step) + " does not match epoch " +
                                     num(p.epoch) + " and step_in_epoch " + num(p.step_in_epoch) + " (expected " +
                                     num(step) + ")");
  require(p.samples_seen == samples, "/progress samples_seen " + num(p.samples_seen) + " does not match epoch " +
                                         num(p.epoch) + " and step_in_epoch " + num(p.step_in_epoch) +
                                         " (expected " + num(samples) + ")");
  require(p.world_size_at_save >= 1 && p.world_size_at_save <= batch,
          "/progress world_size_at_save " + num(p.world_size_at_save) + " is out of range (1.." + num(batch) + ")");
  require(state.optimizer_step == p.global_step, "/optimizer step " + num(state.optimizer_step) +
                                                     " does not match /progress global_step " + num(p.global_step));

  // The unfinished epoch's stats. Version-1 writers carried a resumed run's partial-epoch stats into
  // the epoch-boundary checkpoints after it; at a boundary they mean nothing, so such a file loads
  // with them cleared. A version-2 file must hold zeros there.
  if (p.step_in_epoch == 0 && version == 1) {
    p.epoch_loss_sum = 0.0;
    p.epoch_correct = 0;
    p.epoch_samples = 0;
  }
  require(std::isfinite(p.epoch_loss_sum) && p.epoch_loss_sum >= 0.0,
          "/progress epoch_loss_sum " + real(p.epoch_loss_sum) + " is not a finite, non-negative number");
  const std::int64_t trained = p.step_in_epoch * batch;
  require(p.epoch_correct >= 0 && p.epoch_correct <= p.epoch_samples && p.epoch_samples <= trained,
          "/progress epoch_correct " + num(p.epoch_correct) + " and epoch_samples " + num(p.epoch_samples) +
              " are out of range (0 <= correct <= samples <= " + num(trained) + " after " + num(p.step_in_epoch) +
              " step(s))");
  require(p.step_in_epoch != 0 || p.epoch_loss_sum == 0.0,
          "/progress epoch_loss_sum " + real(p.epoch_loss_sum) + " is not 0 at an epoch boundary (step_in_epoch 0)");

  const CheckpointMetrics& m = state.metrics;
  require(std::isfinite(m.train_loss) && m.train_loss >= 0.0,
          "/metrics train_loss " + real(m.train_loss) + " is not a finite, non-negative number");
  require(std::isfinite(m.test_loss) && m.test_loss >= 0.0,
          "/metrics test_loss " + real(m.test_loss) + " is not a finite, non-negative number");
  require(m.test_accuracy >= 0.0 && m.test_accuracy <= 1.0,
          "/metrics test_accuracy " + real(m.test_accuracy) + " is out of range (0..1)");
}

}  // namespace

struct CheckpointReader::Opened {
  const h5::QuietErrors quiet;  // for as long as libhdf5 has the file: our one line replaces its stack
  OpenCheckpoint checkpoint;
  explicit Opened(const std::string& path) : checkpoint(open_checkpoint(path)) {}
};

CheckpointReader::CheckpointReader(const std::string& path) : opened_(std::make_unique<Opened>(path)) {
  config_ = read_config(opened_->checkpoint.file, opened_->checkpoint.fid.get());
}

CheckpointReader::~CheckpointReader() = default;

CheckpointConfig read_checkpoint_config(const std::string& path) { return CheckpointReader(path).config(); }

CheckpointState read_checkpoint(const std::string& path, const ParamLayout& layout) {
  return CheckpointReader(path).read(layout);
}

CheckpointState CheckpointReader::read(const ParamLayout& layout) const {
  const OpenCheckpoint& opened = opened_->checkpoint;
  const h5::FileContext& file = opened.file;
  const hid_t fid = opened.fid.get();

  CheckpointState state;
  state.verified_whole = opened.version >= 2;
  state.config = config_;
  std::vector<std::string> states;
  try {
    states = schema::state_names(state.config.optimizer);
  } catch (const std::invalid_argument& e) {
    file.fail(std::string("/config: ") + e.what());
  }
  {
    const h5::Node root{file.own(H5Gopen2(fid, "/", H5P_DEFAULT), H5Gclose, "H5Gopen2", "/"), "/"};
    if (opened.version >= 2) state.run_id = h5::read_string_attr(file, root, schema::kRunIdAttr);
  }

  const auto total = static_cast<std::size_t>(layout.total());
  state.params.resize(total);
  h5::open_group(file, fid, schema::kModelGroup);
  for (const ParamView& view : layout.views()) read_checksummed(file, fid, param_path(view), view, state.params.data());

  const h5::Node optimizer = h5::open_group(file, fid, schema::kOptimizerGroup);
  state.optimizer_step = h5::read_int64_attr(file, optimizer, "step");
  state.optimizer_state.resize(states.size() * total);
  for (std::size_t s = 0; s < states.size(); ++s) {
    float* copy = state.optimizer_state.data() + s * total;
    for (const ParamView& view : layout.views()) read_checksummed(file, fid, state_path(view, states[s]), view, copy);
  }

  if (h5::exists(file, fid, schema::kStateGroup)) {
    const h5::Node bn = h5::open_group(file, fid, schema::kStateGroup);
    const std::int64_t count = h5::read_int64_attr(file, bn, "count");
    if (count <= 0 || count > std::int64_t{1} << 30) file.fail("/state count " + std::to_string(count) + " is out of range");
    state.bn_running.resize(static_cast<std::size_t>(count));
    ParamView running;
    running.shape = {count};
    running.size = count;
    read_checksummed(file, fid, schema::kBnRunningPath, running, state.bn_running.data());
  }

  const h5::Node progress = h5::open_group(file, fid, schema::kProgressGroup);
  state.progress.epoch = h5::read_int64_attr(file, progress, "epoch");
  state.progress.step_in_epoch = h5::read_int64_attr(file, progress, "step_in_epoch");
  state.progress.global_step = h5::read_int64_attr(file, progress, "global_step");
  state.progress.samples_seen = h5::read_int64_attr(file, progress, "samples_seen");
  state.progress.world_size_at_save = read_int_attr(file, progress, "world_size_at_save");
  if (opened.version >= 2 || has_attr(file, progress, "epoch_samples")) {
    state.progress.epoch_loss_sum = h5::read_double_attr(file, progress, "epoch_loss_sum");
    state.progress.epoch_correct = h5::read_int64_attr(file, progress, "epoch_correct");
    state.progress.epoch_samples = h5::read_int64_attr(file, progress, "epoch_samples");
  }

  read_rng(file, fid);

  const h5::Node metrics = h5::open_group(file, fid, schema::kMetricsGroup);
  state.metrics.train_loss = h5::read_double_attr(file, metrics, "train_loss");
  state.metrics.test_loss = h5::read_double_attr(file, metrics, "test_loss");
  state.metrics.test_accuracy = h5::read_double_attr(file, metrics, "test_accuracy");
  check_progress(file, state, opened.version);
  return state;
}

}  // namespace cnn
