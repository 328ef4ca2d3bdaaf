// Writes the HDF5 checkpoint (format version 2; layout in docs/CHECKPOINT.md). The reader is
// src/io/checkpoint_read.cpp, the header in the user block src/io/checkpoint_image.cpp.
#include "cnn/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <iterator>
#include <stdexcept>

#include "io/checkpoint_image.hpp"
#include "io/checkpoint_schema.hpp"
#include "cnn/errors.hpp"
#include "cnn/network.hpp"
#include "cnn/test_hooks.hpp"
#include "io/fsync_util.hpp"
#include "io/hdf5_util.hpp"
#include "io/regular_file.hpp"

#ifndef CNN_VERSION
#define CNN_VERSION "unknown"
#endif

namespace cnn {
namespace schema {

std::vector<std::string> state_names(const std::string& optimizer) {
  if (optimizer == "sgd") return {};
  if (optimizer == "momentum") return {"velocity"};
  if (optimizer == "adam" || optimizer == "adamw") return {"m", "v"};
  throw std::invalid_argument("unknown optimizer '" + optimizer + "' (expected sgd, momentum, adam or adamw)");
}

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

std::string param_path(const ParamView& view) { return std::string(kModelGroup) + "/" + view.layer + "/" + view.param; }

std::string state_path(const ParamView& view, const std::string& state) {
  return std::string(kOptimizerGroup) + "/" + view.layer + "/" + view.param + "/" + state;
}

}  // namespace schema

namespace {

constexpr const char* kProgramVersion = CNN_VERSION;
constexpr std::size_t kTimestampCapacity = 32;
constexpr mode_t kNewFileMode = 0644;
// The in-memory file grows by this much at least; sized from the tensors, one allocation suffices.
constexpr std::size_t kMinImageIncrement = std::size_t{1} << 16;
constexpr std::size_t kMetadataAllowance = std::size_t{1} << 16;

using schema::checksum;
using schema::param_path;
using schema::state_path;

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

std::vector<std::string> states_for_write(const std::string& path, const CheckpointMeta& meta,
                                          const CheckpointTensors& tensors, const ParamLayout& layout) {
  std::vector<std::string> names;
  try {
    names = schema::state_names(meta.config.optimizer);
  } catch (const std::invalid_argument& e) {
    internal_error(path, e.what());
  }
  const auto total = static_cast<std::size_t>(layout.total());
  if (tensors.params.size != total) {
    internal_error(path, "params hold " + std::to_string(tensors.params.size) + " floats, the layout " +
                             std::to_string(total));
  }
  if (tensors.optimizer_state.size != names.size() * total) {
    internal_error(path, "optimizer '" + meta.config.optimizer + "' keeps " + std::to_string(names.size()) +
                             " state tensor(s) per parameter, but optimizer_state holds " +
                             std::to_string(tensors.optimizer_state.size) + " floats for a layout of " +
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

void write_groups(const h5::FileContext& file, hid_t fid, const CheckpointMeta& state,
                  const CheckpointTensors& tensors, const ParamLayout& layout, const std::vector<std::string>& states) {
  const h5::Node root{file.own(H5Gopen2(fid, "/", H5P_DEFAULT), H5Gclose, "H5Gopen2", "/"), "/"};
  h5::write_attr(file, root, "format", kCheckpointFormat);
  h5::write_attr(file, root, "version", static_cast<std::int64_t>(kCheckpointVersion));
  h5::write_attr(file, root, "created", utc_timestamp(file));
  h5::write_attr(file, root, "program_version", kProgramVersion);
  h5::write_attr(file, root, schema::kRunIdAttr, state.run_id);

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
  h5::write_attr(file, config, "precision", c.precision);
  h5::write_attr(file, config, "lr_schedule", c.lr_schedule);
  h5::write_attr(file, config, "warmup_steps", c.warmup_steps);
  h5::write_attr(file, config, "total_steps", c.total_steps);
  h5::write_attr(file, config, "weight_decay", c.weight_decay);
  h5::write_attr(file, config, "nesterov", static_cast<std::int64_t>(c.nesterov ? 1 : 0));
  h5::write_attr(file, config, "label_smoothing", c.label_smoothing);
  h5::write_attr(file, config, "augment", c.augment);
  h5::write_attr(file, config, "bn_local", static_cast<std::int64_t>(c.bn_local ? 1 : 0));
  if (!c.step_path.empty()) h5::write_attr(file, config, "step_path", c.step_path);

  h5::create_group(file, fid, schema::kModelGroup);
  for (const ParamView& view : layout.views()) {
    write_checksummed(file, fid, param_path(view), view, tensors.params.data);
  }
  const h5::Node optimizer = h5::create_group(file, fid, schema::kOptimizerGroup);
  h5::write_attr(file, optimizer, "step", state.optimizer_step);
  for (std::size_t s = 0; s < states.size(); ++s) {
    const float* copy = tensors.optimizer_state.data + s * static_cast<std::size_t>(layout.total());
    for (const ParamView& view : layout.views()) write_checksummed(file, fid, state_path(view, states[s]), view, copy);
  }

  if (!tensors.bn_running.empty()) {
    const h5::Node bn = h5::create_group(file, fid, schema::kStateGroup);
    const auto count = static_cast<std::int64_t>(tensors.bn_running.size);
    h5::write_attr(file, bn, "count", count);
    ParamView running;
    running.shape = {count};
    running.size = count;
    write_checksummed(file, fid, schema::kBnRunningPath, running, tensors.bn_running.data);
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

// The whole HDF5 file, built in memory (the core driver, no backing store) with a user block for the
// header: libhdf5 never writes to disk, so a full disk surfaces from write(2) with its errno, not from
// inside libhdf5 (where it used to leave the library in a state that crashed at exit).
ckpt::Bytes build_image(const std::string& tmp, const CheckpointMeta& meta, const CheckpointTensors& tensors,
                        const ParamLayout& layout, const std::vector<std::string>& states) {
  const h5::FileContext file(tmp, h5::Mode::kWrite);
  const std::size_t floats = tensors.params.size + tensors.optimizer_state.size + tensors.bn_running.size;
  const std::size_t increment = std::max(kMinImageIncrement, floats * sizeof(float) + kMetadataAllowance);
  const h5::Handle create = file.own(H5Pcreate(H5P_FILE_CREATE), H5Pclose, "H5Pcreate", "");
  file.check(H5Pset_userblock(create.get(), ckpt::kUserBlockBytes), "H5Pset_userblock", "");
  const h5::Handle access = file.own(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate", "");
  file.check(H5Pset_fapl_core(access.get(), increment, 0), "H5Pset_fapl_core", "");
  h5::Handle fid = file.own(H5Fcreate(ckpt::kMemoryFileName, H5F_ACC_TRUNC, create.get(), access.get()), H5Fclose,
                            "H5Fcreate", "");
  write_groups(file, fid.get(), meta, tensors, layout, states);  // every object it opens is closed on return
  file.check(H5Fflush(fid.get(), H5F_SCOPE_LOCAL), "H5Fflush", "");  // the metadata, at its final size
  // The image starts at the superblock: libhdf5 leaves the user block out (its addresses are relative
  // to it), so the file is the header block followed by the image, as libhdf5 itself would lay it out.
  const ssize_t size = H5Fget_file_image(fid.get(), nullptr, 0);
  if (size <= 0) file.fail_call("H5Fget_file_image", "");
  ckpt::Bytes image(ckpt::kUserBlockBytes + static_cast<std::size_t>(size));
  if (H5Fget_file_image(fid.get(), image.data() + ckpt::kUserBlockBytes, static_cast<std::size_t>(size)) != size)
    file.fail_call("H5Fget_file_image", "");
  file.check(fid.close(), "H5Fclose", "");
  ckpt::seal(image);
  return image;
}

// TestHooks::stop_at_checkpoint_write (CNN_TEST_STOP_DURING_WRITE), installed once by main; 0: off.
std::atomic<long> g_stop_at_write{0};

// Test hook (tests/flight_recorder_test.sh): the N-th checkpoint write of this process stops the whole
// process (SIGSTOP) with half of its .tmp written, as a hung file system or node would. The other ranks'
// watchdogs must name this rank.
void test_hook_stop_mid_write() {
  static long writes = 0;
  const long n = g_stop_at_write.load(std::memory_order_relaxed);
  if (n > 0 && ++writes == n) std::raise(SIGSTOP);
}

[[noreturn]] void fail_errno(const std::string& path, const char* what, int err) {
  throw IoError(path + ": " + what + ": " + fsutil::errno_text(err));
}

// Plain write(2) calls, then fsync on the same descriptor: a write-back error (a full disk on NFS,
// delayed allocation) is reported to the descriptor that wrote, not necessarily to a later open.
void write_file(const std::string& tmp, const ckpt::Bytes& image) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, kNewFileMode);
  if (fd < 0) fail_errno(tmp, "cannot create", errno);
  try {
    const std::size_t half = image.size() / 2;
    fsutil::write_all(fd, image.data(), half, tmp);
    fsutil::test_write_pause();  // with CNN_TEST_WRITE_PAUSE_MS: a kill finds a half-written .tmp on disk
    test_hook_stop_mid_write();
    fsutil::write_all(fd, image.data() + half, image.size() - half, tmp);
    if (::fsync(fd) != 0) fail_errno(tmp, "fsync failed", errno);
  } catch (...) {
    ::close(fd);  // the first error is the one to report
    throw;
  }
  if (::close(fd) != 0) fail_errno(tmp, "close failed", errno);
}

// TestHooks::kill_at_checkpoint_write (CNN_TEST_KILL_DURING_WRITE), installed once by main; 0: off.
std::atomic<long> g_kill_at_write{0};

// Test hook (tests/signal_test.sh): the N-th checkpoint write of this process dies by SIGKILL after
// the .tmp is complete but before the rename, as a node failure would. The previous checkpoint must
// survive and the next start must remove the stale .tmp.
void test_hook_kill_before_rename() {
  static long writes = 0;
  const long n = g_kill_at_write.load(std::memory_order_relaxed);
  if (n <= 0) return;
  if (++writes == n) std::raise(SIGKILL);
}

}  // namespace

void set_test_kill_at_checkpoint_write(long nth_write) { g_kill_at_write.store(nth_write); }
void set_test_stop_at_checkpoint_write(long nth_write) { g_stop_at_write.store(nth_write); }

void write_checkpoint(const std::string& path, const CheckpointMeta& meta, const CheckpointTensors& tensors,
                      const ParamLayout& layout) {
  const std::vector<std::string> states = states_for_write(path, meta, tensors, layout);
  const std::string tmp = path + schema::kTmpSuffix;
  try {
    ckpt::Bytes image;
    {
      // libhdf5 only for the image in memory, under the library's lock (QuietErrors takes it): the
      // writes and fsyncs below, the slow part, leave the library free for the data reader.
      const h5::QuietErrors quiet;
      image = build_image(tmp, meta, tensors, layout, states);
    }
    write_file(tmp, image);
    test_hook_kill_before_rename();
    fsutil::rename_durably(tmp, path);
  } catch (...) {
    // Best effort: the write error is the one to report, and `path` was never touched.
    fsutil::remove_if_present(tmp);
    throw;
  }
}

void reseal_checkpoint(const std::string& path) {
  ckpt::Bytes image;
  {
    const fsutil::ReadFd in = fsutil::open_regular_file(path);
    struct stat info {};
    if (::fstat(in.get(), &info) != 0) fail_errno(path, "cannot stat", errno);
    image.resize(static_cast<std::size_t>(info.st_size));
    fsutil::read_exactly(in.get(), image.data(), image.size(), path);
  }
  // Only a file with a user block of our size can take the header; libhdf5's signature follows it.
  static constexpr unsigned char kSignature[] = {0x89, 'H', 'D', 'F'};
  if (image.size() < ckpt::kUserBlockBytes + sizeof(kSignature) ||
      !std::equal(std::begin(kSignature), std::end(kSignature), image.begin() + ckpt::kUserBlockBytes))
    throw InputError(path + ": not a version-2 checkpoint (no HDF5 signature after a 512-byte user block)");
  ckpt::seal(image);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail_errno(path, "cannot open for writing", errno);
  const ssize_t n = ::pwrite(fd, image.data(), ckpt::kUserBlockBytes, 0);
  const int err = errno;
  if (::close(fd) != 0 || n != static_cast<ssize_t>(ckpt::kUserBlockBytes)) fail_errno(path, "write failed", n < 0 ? err : EIO);
}

}  // namespace cnn
