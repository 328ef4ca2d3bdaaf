// The CSV file of `cnn_mpi predict` (include/cnn/prediction_file.hpp): created beside its name,
// linked into place only when complete, never over an existing file.
#include "cnn/prediction_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <vector>

#include "cnn/errors.hpp"
#include "io/fsync_util.hpp"

namespace cnn {
namespace {

std::string base_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

UsageError exists_error(const std::string& path) {
  return UsageError(path + ": already exists; predict never overwrites a file (give another --out, or remove it)");
}

// The permissions a file created by open(2) with mode 0666 would have: mkstemp makes it 0600.
mode_t default_file_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace

void require_new_output(const std::string& path) {
  if (path == kStandardOutput) return;
  if (path.empty() || path.back() == '/') throw UsageError("--out '" + path + "' names a directory; predict needs a file name");
  struct stat info {};
  if (::lstat(path.c_str(), &info) == 0) throw exists_error(path);
  if (errno != ENOENT && errno != ENOTDIR) throw IoError(path + ": cannot stat: " + fsutil::errno_text(errno));
  const std::string dir = fsutil::parent_dir(path);
  if (::stat(dir.c_str(), &info) != 0) throw IoError(dir + ": directory of --out: " + fsutil::errno_text(errno));
  if (!S_ISDIR(info.st_mode)) throw IoError(dir + ": directory of --out is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw IoError(dir + ": directory of --out is not writable: " + fsutil::errno_text(errno));
}

PredictionFile::PredictionFile(const std::string& path) : path_(path) {
  if (path == kStandardOutput) {
    fd_ = STDOUT_FILENO;
    return;
  }
  std::string pattern = fsutil::parent_dir(path) + "/." + base_name(path) + ".XXXXXX.tmp";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  fd_ = ::mkstemps(name.data(), 4);  // 4: the ".tmp" after the X's
  if (fd_ < 0) throw IoError(pattern + ": cannot create the temporary file of --out: " + fsutil::errno_text(errno));
  temp_ = name.data();
  if (::fchmod(fd_, default_file_mode()) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    fsutil::remove_if_present(temp_);
    throw IoError(temp_ + ": cannot set its permissions: " + fsutil::errno_text(err));
  }
}

PredictionFile::~PredictionFile() {
  if (temp_.empty()) return;
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) fsutil::remove_if_present(temp_);
}

void PredictionFile::write(const std::string& text) { fsutil::write_all(fd_, text, temp_.empty() ? path_ : temp_); }

void PredictionFile::commit() {
  if (temp_.empty()) {
    if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS)  // a pipe or terminal cannot be synced
      throw IoError("standard output: cannot flush: " + fsutil::errno_text(errno));
    committed_ = true;
    return;
  }
  if (::fsync(fd_) != 0) throw IoError(temp_ + ": cannot fsync: " + fsutil::errno_text(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw IoError(temp_ + ": cannot close: " + fsutil::errno_text(errno));
  fsutil::test_write_pause();
  if (::link(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    if (err == EEXIST) throw exists_error(path_);
    // File systems without hard links: the rename that refuses to replace.
    if (err != EPERM && err != EOPNOTSUPP && err != ENOSYS)
      throw IoError(path_ + ": cannot link the finished file into place: " + fsutil::errno_text(err));
    if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE) != 0) {
      if (errno == EEXIST) throw exists_error(path_);
      throw IoError(path_ + ": cannot move the finished file into place: " + fsutil::errno_text(errno));
    }
  }
  committed_ = true;
  fsutil::remove_if_present(temp_);  // after a link, the name stays; after renameat2 it is gone already
  fsutil::fsync_directory(fsutil::parent_dir(path_));
}

}  // namespace cnn
