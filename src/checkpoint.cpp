// Writes and reads the HDF5 checkpoint (format version 1; layout in docs/CHECKPOINT.md).
#include "cnn/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <stdexcept>

#include "checkpoint_schema.hpp"
#include "cnn/errors.hpp"
#include "cnn/network.hpp"
#include "fsync_util.hpp"
#include "hdf5_util.hpp"

#ifndef CNN_VERSION
#define CNN_VERSION "unknown"
#endif

namespace cnn {
namespace schema {

std::vector<std::string> state_names(const std::string& optimizer) {
  if (optimizer == "sgd") return {};
  if (optimizer == "momentum") return {"velocity"};
  if (optimizer == "adam") return {"m", "v"};
  throw std::invalid_argument("unknown optimizer '" + optimizer + "' (expected sgd, momentum or adam)");
}

}  // namespace schema

namespace {

constexpr const char* kProgramVersion = CNN_VERSION;
constexpr std::size_t kInputShapeRank = 3;  // channels, height, width
constexpr std::size_t kTimestampCapacity = 32;

// FNV-1a 64 over the values' little-endian bytes: cheap (a few ms for a d=256 model), no dependency,
// and enough to catch torn writes and bit rot, which is all a checksum here is for.
constexpr std::uint64_t kFnvOffsetBasis = 14695981039346656037ULL;
constexpr std::uint64_t kFnvPrime = 1099511628211ULL;

std::uint64_t checksum(const float* values, std::int64_t count) {
  static_assert(sizeof(float) == 4, "float32 expected");
  const auto* bytes = reinterpret_cast<const unsigned char*>(values);
  const std::size_t size = static_cast<std::size_t>(count) * sizeof(float);
  std::uint64_t hash = kFnvOffsetBasis;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  for (std::size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i ^ 3]) * kFnvPrime;  // byte-swap each float
#else
  for (std::size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * kFnvPrime;
#endif
  return hash;
}

std::string param_path(const ParamView& view) { return std::string(schema::kModelGroup) + "/" + view.layer + "/" + view.param; }

std::string state_path(const ParamView& view, const std::string& state) {
  return std::string(schema::kOptimizerGroup) + "/" + view.layer + "/" + view.param + "/" + state;
}

// "2024-05-01T12:34:56Z"
std::string utc_timestamp(const h5::FileContext& file) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  char text[kTimestampCapacity] = {0};
  if (now == static_cast<std::time_t>(-1) || gmtime_r(&now, &utc) == nullptr ||
      std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc) == 0) {
    file.fail("cannot format the current UTC time");
  }
  return text;
}

// A caller passing buffers that do not match the layout is a bug, not bad input.
[[noreturn]] void internal_error(const std::string& path, const std::string& what) {
  throw Error(ExitCode::kFailure, path + ": internal error: " + what);
}

std::vector<std::string> states_for_write(const std::string& path, const CheckpointState& state,
                                          const ParamLayout& layout) {
  std::vector<std::string> names;
  try {
    names = schema::state_names(state.config.optimizer);
  } catch (const std::invalid_argument& e) {
    internal_error(path, e.what());
  }
  const auto total = static_cast<std::size_t>(layout.total());
  if (state.params.size() != total) {
    internal_error(path, "params hold " + std::to_string(state.params.size()) + " floats, the layout " +
                             std::to_string(total));
  }
  if (state.optimizer_state.size() != names.size() * total) {
    internal_error(path, "optimizer '" + state.config.optimizer + "' keeps " + std::to_string(names.size()) +
                             " state tensor(s) per parameter, but optimizer_state holds " +
                             std::to_string(state.optimizer_state.size()) + " floats for a layout of " +
                             std::to_string(total));
  }
  return names;
}

void write_checksummed(const h5::FileContext& file, hid_t fid, const std::string& path, const ParamView& view,
                       const float* buffer) {
  const float* data = buffer + view.offset;
  const h5::Node dataset = h5::write_float_dataset(file, fid, path, view.shape, data);
  h5::write_attr(file, dataset, schema::kChecksumAttr, checksum(data, view.size));
}

void write_groups(const h5::FileContext& file, hid_t fid, const CheckpointState& state, const ParamLayout& layout,
                  const std::vector<std::string>& states) {
  const h5::Node root{file.own(H5Gopen2(fid, "/", H5P_DEFAULT), H5Gclose, "H5Gopen2", "/"), "/"};
  h5::write_attr(file, root, "format", kCheckpointFormat);
  h5::write_attr(file, root, "version", static_cast<std::int64_t>(kCheckpointVersion));
  h5::write_attr(file, root, "created", utc_timestamp(file));
  h5::write_attr(file, root, "program_version", kProgramVersion);

  const CheckpointConfig& c = state.config;
  const h5::Node config = h5::create_group(file, fid, schema::kConfigGroup);
  h5::write_attr(file, config, "model", c.model);
  h5::write_attr(file, config, "spec", c.spec);
  h5::write_attr(file, config, "filters", static_cast<std::int64_t>(c.filters));
  h5::write_attr(file, config, "input_shape",
                 std::vector<std::int64_t>{c.input.channels, c.input.height, c.input.width});
  h5::write_attr(file, config, "classes", static_cast<std::int64_t>(c.classes));
  h5::write_attr(file, config, "global_batch", c.global_batch);
  h5::write_attr(file, config, "lr", c.lr);
  h5::write_attr(file, config, "optimizer", c.optimizer);
  h5::write_attr(file, config, "momentum", c.momentum);
  h5::write_attr(file, config, "beta1", c.beta1);
  h5::write_attr(file, config, "beta2", c.beta2);
  h5::write_attr(file, config, "eps", c.eps);
  h5::write_attr(file, config, "seed", c.seed);
  h5::write_attr(file, config, "dataset", c.dataset);
  h5::write_attr(file, config, "dataset_digest", c.dataset_digest);
  h5::write_attr(file, config, "train_samples", c.train_samples);
  h5::write_attr(file, config, "epochs", c.epochs);

  h5::create_group(file, fid, schema::kModelGroup);
  for (const ParamView& view : layout.views()) {
    write_checksummed(file, fid, param_path(view), view, state.params.data());
  }
  const h5::Node optimizer = h5::create_group(file, fid, schema::kOptimizerGroup);
  h5::write_attr(file, optimizer, "step", state.optimizer_step);
  for (std::size_t s = 0; s < states.size(); ++s) {
    const float* copy = state.optimizer_state.data() + s * static_cast<std::size_t>(layout.total());
    for (const ParamView& view : layout.views()) write_checksummed(file, fid, state_path(view, states[s]), view, copy);
  }

  const CheckpointProgress& p = state.progress;
  const h5::Node progress = h5::create_group(file, fid, schema::kProgressGroup);
  h5::write_attr(file, progress, "epoch", p.epoch);
  h5::write_attr(file, progress, "step_in_epoch", p.step_in_epoch);
  h5::write_attr(file, progress, "global_step", p.global_step);
  h5::write_attr(file, progress, "samples_seen", p.samples_seen);
  h5::write_attr(file, progress, "world_size_at_save", static_cast<std::int64_t>(p.world_size_at_save));
  h5::write_attr(file, progress, "epoch_loss_sum", p.epoch_loss_sum);
  h5::write_attr(file, progress, "epoch_correct", p.epoch_correct);
  h5::write_attr(file, progress, "epoch_samples", p.epoch_samples);

  const h5::Node rng = h5::create_group(file, fid, schema::kRngGroup);
  h5::write_attr(file, rng, "seed", c.seed);
  h5::write_attr(file, rng, "sampler", schema::kSamplerName);
  h5::write_attr(file, rng, "init", schema::kInitName);

  const h5::Node metrics = h5::create_group(file, fid, schema::kMetricsGroup);
  h5::write_attr(file, metrics, "train_loss", state.metrics.train_loss);
  h5::write_attr(file, metrics, "test_loss", state.metrics.test_loss);
  h5::write_attr(file, metrics, "test_accuracy", state.metrics.test_accuracy);
}

void write_hdf5_file(const std::string& tmp, const CheckpointState& state, const ParamLayout& layout,
                     const std::vector<std::string>& states) {
  const h5::FileContext file(tmp, h5::Mode::kWrite);
  h5::Handle fid = file.own(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose,
                            "H5Fcreate", "");
  fsutil::test_write_pause();
  write_groups(file, fid.get(), state, layout, states);  // every object it opens is closed on return
  H5Fflush(fid.get(), H5F_SCOPE_LOCAL);  // with the hook below: a kill finds a half-written .tmp on disk
  fsutil::test_write_pause();
  file.check(fid.close(), "H5Fclose", "");               // flushes; a full disk can surface only here
}

// ---- reading ----------------------------------------------------------------------------------------

struct OpenCheckpoint {
  h5::FileContext file;
  h5::Handle fid;
};

OpenCheckpoint open_checkpoint(const std::string& path) {
  // Distinguish "cannot open" (IoError, exit 3) from "opens but is not ours" (InputError, exit 2).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(path + ": cannot open checkpoint: " + fsutil::errno_text(errno));
  struct stat info {};
  const bool is_directory = ::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode);
  if (is_directory) {
    ::close(fd);
    throw IoError(path + ": cannot open checkpoint: " + fsutil::errno_text(EISDIR));
  }
  if (::close(fd) != 0) throw IoError(path + ": close failed: " + fsutil::errno_text(errno));
  if (H5Fis_hdf5(path.c_str()) <= 0) throw InputError(path + ": not an HDF5 file");

  OpenCheckpoint opened{h5::FileContext(path, h5::Mode::kRead), {}};
  const h5::FileContext& file = opened.file;
  opened.fid = file.own(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "H5Fopen", "");
  const h5::Node root{file.own(H5Gopen2(opened.fid.get(), "/", H5P_DEFAULT), H5Gclose, "H5Gopen2", "/"), "/"};
  if (file.check(H5Aexists(root.id(), "format"), "H5Aexists", "/") == 0) {
    file.fail("not a cnn_mpi checkpoint (no 'format' attribute on /)");
  }
  const std::string format = h5::read_string_attr(file, root, "format");
  if (format != kCheckpointFormat) {
    file.fail("not a cnn_mpi checkpoint (format is '" + format + "', expected '" + kCheckpointFormat + "')");
  }
  const std::int64_t version = h5::read_int64_attr(file, root, "version");
  if (version != kCheckpointVersion) {
    file.fail("unsupported checkpoint version " + std::to_string(version) + " (this program reads version " +
              std::to_string(kCheckpointVersion) + ")");
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
  require(c.train_samples >= 0, "train_samples " + std::to_string(c.train_samples) + " is negative");
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
  if (has_attr(file, group, "beta1")) c.beta1 = h5::read_double_attr(file, group, "beta1");
  if (has_attr(file, group, "beta2")) c.beta2 = h5::read_double_attr(file, group, "beta2");
  if (has_attr(file, group, "eps")) c.eps = h5::read_double_attr(file, group, "eps");
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

// Test hook (tests/resume_test.sh): CNN_TEST_KILL_DURING_WRITE=N makes the N-th checkpoint write of
// this process die by SIGKILL after the .tmp is complete but before the rename, as a node failure
// would. The previous checkpoint must survive and the next start must remove the stale .tmp.
void test_hook_kill_before_rename() {
  static int writes = 0;
  const char* text = std::getenv("CNN_TEST_KILL_DURING_WRITE");
  if (text == nullptr) return;
  ++writes;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (end != text && *end == '\0' && n == writes) std::raise(SIGKILL);
}

}  // namespace

void write_checkpoint(const std::string& path, const CheckpointState& state, const ParamLayout& layout) {
  const h5::QuietErrors quiet;
  const std::vector<std::string> states = states_for_write(path, state, layout);
  const std::string tmp = path + schema::kTmpSuffix;
  try {
    write_hdf5_file(tmp, state, layout, states);
    test_hook_kill_before_rename();
    fsutil::rename_durably(tmp, path);
  } catch (...) {
    // Best effort: the write error is the one to report, and `path` was never touched.
    fsutil::remove_if_present(tmp);
    throw;
  }
}

CheckpointConfig read_checkpoint_config(const std::string& path) {
  const h5::QuietErrors quiet;
  const OpenCheckpoint opened = open_checkpoint(path);
  return read_config(opened.file, opened.fid.get());
}

CheckpointState read_checkpoint(const std::string& path, const ParamLayout& layout) {
  const h5::QuietErrors quiet;
  const OpenCheckpoint opened = open_checkpoint(path);
  const h5::FileContext& file = opened.file;
  const hid_t fid = opened.fid.get();

  CheckpointState state;
  state.config = read_config(file, fid);
  std::vector<std::string> states;
  try {
    states = schema::state_names(state.config.optimizer);
  } catch (const std::invalid_argument& e) {
    file.fail(std::string("/config: ") + e.what());
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

  const h5::Node progress = h5::open_group(file, fid, schema::kProgressGroup);
  state.progress.epoch = h5::read_int64_attr(file, progress, "epoch");
  state.progress.step_in_epoch = h5::read_int64_attr(file, progress, "step_in_epoch");
  state.progress.global_step = h5::read_int64_attr(file, progress, "global_step");
  state.progress.samples_seen = h5::read_int64_attr(file, progress, "samples_seen");
  state.progress.world_size_at_save = read_int_attr(file, progress, "world_size_at_save");
  if (has_attr(file, progress, "epoch_samples")) {
    state.progress.epoch_loss_sum = h5::read_double_attr(file, progress, "epoch_loss_sum");
    state.progress.epoch_correct = h5::read_int64_attr(file, progress, "epoch_correct");
    state.progress.epoch_samples = h5::read_int64_attr(file, progress, "epoch_samples");
  }

  read_rng(file, fid);

  const h5::Node metrics = h5::open_group(file, fid, schema::kMetricsGroup);
  state.metrics.train_loss = h5::read_double_attr(file, metrics, "train_loss");
  state.metrics.test_loss = h5::read_double_attr(file, metrics, "test_loss");
  state.metrics.test_accuracy = h5::read_double_attr(file, metrics, "test_accuracy");
  return state;
}

}  // namespace cnn
