// Opening a file for reading without ever blocking, and only when it is a regular file.
//
// open(2) of a FIFO with no writer, or of some devices, blocks forever, and neither the watchdog
// (it starts later) nor SIGTERM (our handler only sets a flag) can end it. So every file the trainer
// reads is opened with O_NONBLOCK, checked with fstat, and refused unless it is a regular file
// (symbolic links to regular files are fine). Private to src/.
#pragma once

#include <string>

namespace cnn::fsutil {

// An open file descriptor, closed on destruction. Move-only.
class ReadFd {
 public:
  ReadFd() = default;
  explicit ReadFd(int fd) : fd_(fd) {}
  ~ReadFd();
  ReadFd(ReadFd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ReadFd& operator=(ReadFd&& other) noexcept;
  ReadFd(const ReadFd&) = delete;
  ReadFd& operator=(const ReadFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Opens `path` read-only, blocking mode restored after the check. Throws IoError (exit 3), one line
// naming the path: "PATH: file does not exist", "PATH: is a directory, expected a file",
// "PATH: is a FIFO (named pipe), not a regular file", "PATH: cannot open: <strerror>".
ReadFd open_regular_file(const std::string& path);

// The same check for a path that a library opens by name (libhdf5): opens it as above and closes it.
// A file replaced between this check and the library's open is not covered; the data files and
// checkpoints this guards are not written by anyone while a run reads them.
void require_regular_file(const std::string& path);

// Reads exactly `size` bytes (read(2) may return fewer). Throws IoError naming `path` on a read error
// or an early end of file.
void read_exactly(int fd, void* buffer, std::size_t size, const std::string& path);

}  // namespace cnn::fsutil
