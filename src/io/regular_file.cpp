#include "io/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "cnn/errors.hpp"
#include "io/fsync_util.hpp"

namespace cnn::fsutil {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

}  // namespace

ReadFd::~ReadFd() {
  if (fd_ >= 0) ::close(fd_);
}

ReadFd& ReadFd::operator=(ReadFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

ReadFd open_regular_file(const std::string& path) {
  // O_NONBLOCK: the open of a FIFO returns at once instead of waiting for a writer.
  ReadFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) throw IoError(path + ": file does not exist");
    // open(2) of a socket fails with ENXIO: name what is there rather than "No such device or address".
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode) && !S_ISDIR(info.st_mode))
      throw IoError(path + ": is " + std::string(kind_of(info.st_mode)) + ", not a regular file");
    throw IoError(path + ": cannot open: " + errno_text(err));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) throw IoError(path + ": cannot stat: " + errno_text(errno));
  if (S_ISDIR(info.st_mode)) throw IoError(path + ": is a directory, expected a file");
  if (!S_ISREG(info.st_mode)) throw IoError(path + ": is " + std::string(kind_of(info.st_mode)) + ", not a regular file");
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
    throw IoError(path + ": cannot set blocking mode: " + errno_text(errno));
  return fd;
}

void require_regular_file(const std::string& path) { open_regular_file(path); }

void read_exactly(int fd, void* buffer, std::size_t size, const std::string& path) {
  auto* out = static_cast<unsigned char*>(buffer);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t got = ::read(fd, out + done, size - done);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw IoError(path + ": read failed: " + errno_text(errno));
    }
    if (got == 0)
      throw IoError(path + ": file shrank while being read: got " + std::to_string(done) + " of " +
                    std::to_string(size) + " bytes");
    done += static_cast<std::size_t>(got);
  }
}

}  // namespace cnn::fsutil
