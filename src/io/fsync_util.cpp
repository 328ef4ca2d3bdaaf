#include "io/fsync_util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>

#include "cnn/errors.hpp"
#include "cnn/test_hooks.hpp"

namespace cnn::fsutil {
namespace {

constexpr mode_t kNewFileMode = 0644;
constexpr mode_t kDirMode = 0755;
constexpr std::size_t kErrorTextCapacity = 256;

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw IoError(path + ": " + what + ": " + errno_text(err));
}

// Closes `fd`; a close error after a successful fsync still means the data may be lost (NFS).
void close_checked(int fd, const std::string& path) {
  if (::close(fd) != 0) fail(path, "close failed", errno);
}

void fsync_opened(const std::string& path, int open_flags, const char* what) {
  const int fd = ::open(path.c_str(), open_flags | O_CLOEXEC);
  if (fd < 0) fail(path, what, errno);
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);  // the fsync error is the one worth reporting
    fail(path, "fsync failed", err);
  }
  close_checked(fd, path);
}

}  // namespace

std::string errno_text(int err) {
  char buffer[kErrorTextCapacity] = {0};
  // GNU strerror_r may return a static string instead of filling the buffer; the XSI one returns int.
  const auto result = ::strerror_r(err, buffer, sizeof(buffer));
  if constexpr (std::is_same_v<decltype(result), char* const>) {
    return result != nullptr ? std::string(result) : "errno " + std::to_string(err);
  } else {
    return result == 0 ? std::string(buffer) : "errno " + std::to_string(err);
  }
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void fsync_file(const std::string& path) { fsync_opened(path, O_RDONLY, "cannot open to fsync"); }

void fsync_directory(const std::string& dir) {
  fsync_opened(dir, O_RDONLY | O_DIRECTORY, "cannot open directory to fsync");
}

namespace {
// TestHooks::write_pause_ms, installed once by main (test_hooks.hpp); 0 everywhere else.
std::atomic<long> g_test_write_pause_ms{0};
}  // namespace

void set_test_write_pause_ms(long milliseconds) { g_test_write_pause_ms.store(milliseconds); }

void test_write_pause() {
  const long pause_ms = g_test_write_pause_ms.load(std::memory_order_relaxed);
  if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
}

void rename_durably(const std::string& from, const std::string& to) {
  fsync_file(from);
  test_write_pause();
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    throw IoError(to + ": cannot rename " + from + " over it: " + errno_text(err));
  }
  test_write_pause();
  fsync_directory(parent_dir(to));
}

void write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t written = 0; written < size;) {
    const ssize_t n = ::write(fd, bytes + written, size - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "write failed", errno);  // ENOSPC, EDQUOT: "No space left on device", ...
    written += static_cast<std::size_t>(n);
  }
}

void write_all(int fd, const std::string& text, const std::string& path) { write_all(fd, text.data(), text.size(), path); }

namespace {

// Opens `path` with O_WRONLY | `create_flags`, writes `text` and closes it, every step checked.
void write_file(const std::string& path, int create_flags, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | create_flags, kNewFileMode);
  if (fd < 0) {
    const int err = errno;
    if (err == EEXIST) throw IoError(path + ": exists already; it is not overwritten");
    fail(path, "cannot create", err);
  }
  try {
    write_all(fd, text, path);
  } catch (...) {
    ::close(fd);  // the write error is the one to report
    throw;
  }
  close_checked(fd, path);
}

}  // namespace

void write_new_file(const std::string& path, const std::string& text) {
  // O_EXCL: an existing file, or a link planted in its place, is never written through.
  write_file(path, O_CREAT | O_EXCL | O_NONBLOCK, text);
}

void write_text_durably(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  try {
    write_file(tmp, O_CREAT | O_TRUNC, text);
    rename_durably(tmp, path);
  } catch (...) {
    remove_if_present(tmp);  // best effort: the first error is the one to report
    throw;
  }
}

void make_directories(const std::string& dir) {
  for (std::size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string prefix = dir.substr(0, slash);
    if (::mkdir(prefix.c_str(), kDirMode) != 0 && errno != EEXIST) {
      throw IoError(prefix + ": cannot create directory: " + errno_text(errno));
    }
    if (slash == std::string::npos) break;
  }
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) throw IoError(dir + ": cannot stat: " + errno_text(errno));
  if (!S_ISDIR(info.st_mode)) throw IoError(dir + ": exists and is not a directory");
}

int remove_if_present(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return 0;
  return errno;
}

}  // namespace cnn::fsutil
