// The checkpoints of one run: RUN_DIR/checkpoints/ckpt-e<epoch>-s<global_step>.h5 and `latest`.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <iostream>

#include "io/checkpoint_schema.hpp"
#include "cnn/checkpoint.hpp"
#include "cnn/errors.hpp"
#include "io/fsync_util.hpp"

namespace cnn {
namespace {

constexpr const char* kSubdir = "checkpoints";
constexpr const char* kLatestName = "latest";
constexpr const char* kNamePrefix = "ckpt-e";
constexpr const char* kStepMarker = "-s";
constexpr const char* kExtension = ".h5";
constexpr int kEpochDigits = 4;   // zero-padded so that names also sort by age in `ls`
constexpr int kStepDigits = 8;
constexpr std::size_t kNameCapacity = 64;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string checkpoint_name(const CheckpointProgress& progress) {
  char name[kNameCapacity];
  const int n = std::snprintf(name, sizeof(name), "%s%0*lld%s%0*lld%s", kNamePrefix, kEpochDigits,
                              static_cast<long long>(progress.epoch), kStepMarker, kStepDigits,
                              static_cast<long long>(progress.global_step), kExtension);
  if (n < 0 || static_cast<std::size_t>(n) >= sizeof(name)) {
    throw Error(ExitCode::kFailure, "checkpoint name too long for epoch " + std::to_string(progress.epoch));
  }
  return name;
}

bool parse_digits(const std::string& text, std::size_t begin, std::size_t end, std::int64_t& value) {
  if (begin >= end) return false;
  const char* first = text.data() + begin;
  const char* last = text.data() + end;
  const auto [ptr, ec] = std::from_chars(first, last, value);
  return ec == std::errc() && ptr == last;
}

// Parses "ckpt-e0003-s00001234.h5" into its global step; false for any other name.
bool parse_step(const std::string& name, std::int64_t& global_step) {
  const std::string prefix = kNamePrefix;
  if (name.compare(0, prefix.size(), prefix) != 0 || !ends_with(name, kExtension)) return false;
  const std::size_t marker = name.find(kStepMarker, prefix.size());
  if (marker == std::string::npos) return false;
  std::int64_t epoch = 0;
  const std::size_t step_begin = marker + std::string(kStepMarker).size();
  return parse_digits(name, prefix.size(), marker, epoch) &&
         parse_digits(name, step_begin, name.size() - std::string(kExtension).size(), global_step);
}

std::vector<std::string> directory_entries(const std::string& dir) {
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) throw IoError(dir + ": cannot list directory: " + fsutil::errno_text(errno));
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(handle)) {
    names.emplace_back(entry->d_name);
    errno = 0;
  }
  const int read_error = errno;
  ::closedir(handle);
  if (read_error != 0) throw IoError(dir + ": cannot list directory: " + fsutil::errno_text(read_error));
  return names;
}

}  // namespace

CheckpointDir::CheckpointDir(std::string run_dir) : run_dir_(std::move(run_dir)) {
  while (run_dir_.size() > 1 && run_dir_.back() == '/') run_dir_.pop_back();
  dir_ = run_dir_ + "/" + kSubdir;
}

void CheckpointDir::prepare() const {
  fsutil::make_directories(dir_);
  // Permission bits do not tell (root ignores them; read-only mounts, quotas): try it. Failing now is
  // better than failing at the first checkpoint, hours into a run.
  const std::string probe = dir_ + "/.write-probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, S_IRUSR | S_IWUSR);
  if (fd < 0) throw IoError(dir_ + ": not writable: " + fsutil::errno_text(errno));
  if (::close(fd) != 0) throw IoError(dir_ + ": not writable: " + fsutil::errno_text(errno));
  if (::unlink(probe.c_str()) != 0) throw IoError(dir_ + ": not writable: " + fsutil::errno_text(errno));

  // A writer killed between create and rename leaves NAME.h5.tmp (or latest.tmp): never valid, remove.
  const std::string stale_checkpoint = std::string(kExtension) + schema::kTmpSuffix;
  const std::string stale_latest = std::string(kLatestName) + schema::kTmpSuffix;
  for (const std::string& name : directory_entries(dir_)) {
    if (!ends_with(name, stale_checkpoint) && name != stale_latest) continue;
    const std::string path = dir_ + "/" + name;
    if (const int err = fsutil::remove_if_present(path)) {
      throw IoError(path + ": cannot remove stale partial file: " + fsutil::errno_text(err));
    }
    std::cerr << "warning: removed " << path << " (partial file left by an interrupted checkpoint write)\n";
  }
}

std::string CheckpointDir::path_for(const CheckpointProgress& progress) const {
  return dir_ + "/" + checkpoint_name(progress);
}

std::string CheckpointDir::save(const CheckpointMeta& meta, const CheckpointTensors& tensors, const ParamLayout& layout,
                                int keep) const {
  if (keep < 1) throw UsageError("--keep must be at least 1, got " + std::to_string(keep));
  const std::string name = checkpoint_name(meta.progress);
  const std::string path = dir_ + "/" + name;
  write_checkpoint(path, meta, tensors, layout);
  fsutil::write_text_durably(dir_ + "/" + kLatestName, name + "\n");

  // Pruning is housekeeping: the new checkpoint is safe already, so a failure only warns.
  fsutil::test_write_pause();
  const std::vector<std::string> present = list();
  for (std::size_t i = static_cast<std::size_t>(keep); i < present.size(); ++i) {
    if (present[i] == path) continue;  // never the one just written, even if its step is not the newest
    if (const int err = fsutil::remove_if_present(present[i])) {
      std::cerr << "warning: cannot remove old checkpoint " << present[i] << ": " << fsutil::errno_text(err) << "\n";
    }
  }
  return path;
}

std::vector<std::string> CheckpointDir::list() const {
  struct Entry {
    std::int64_t step;
    std::int64_t mtime_ns;
    std::string path;
  };
  struct stat info {};
  if (::stat(dir_.c_str(), &info) != 0 && errno == ENOENT) return {};  // a fresh run: nothing saved yet

  std::vector<Entry> entries;
  for (const std::string& name : directory_entries(dir_)) {
    std::int64_t step = 0;
    if (!parse_step(name, step)) continue;
    const std::string path = dir_ + "/" + name;
    if (::stat(path.c_str(), &info) != 0) {
      if (errno == ENOENT) continue;  // pruned meanwhile
      throw IoError(path + ": cannot stat: " + fsutil::errno_text(errno));
    }
    const std::int64_t mtime_ns = static_cast<std::int64_t>(info.st_mtim.tv_sec) * 1000000000LL + info.st_mtim.tv_nsec;
    entries.push_back({step, mtime_ns, path});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.step != b.step) return a.step > b.step;
    if (a.mtime_ns != b.mtime_ns) return a.mtime_ns > b.mtime_ns;
    return a.path > b.path;
  });
  std::vector<std::string> paths;
  paths.reserve(entries.size());
  for (Entry& entry : entries) paths.push_back(std::move(entry.path));
  return paths;
}

}  // namespace cnn
