// Shared by the libFuzzer targets (tests/fuzz/fuzz_<name>.cpp; conventions in tests/fuzz/CMakeLists.txt).
//
// A target feeds its input to one of our parsers and lets a cnn::Error (the documented rejection:
// one line, exit 2 or 3) pass quietly. Anything else is a bug and must crash the fuzzer: a sanitizer
// report, a std::exception that is not a cnn::Error (std::bad_alloc from an unchecked size,
// std::out_of_range, ...), or a hang (libFuzzer's -timeout).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

#include "cnn/errors.hpp"

namespace cnn::fuzz {

// Runs `parse`; cnn::Error is an accepted rejection, any other exception aborts with its message.
template <typename F>
void expect_clean(F&& parse) {
  try {
    parse();
  } catch (const cnn::Error&) {
    // the documented way to refuse bad input
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: escaped exception (not a cnn::Error): %s\n", e.what());
    std::abort();
  }
}

// An in-memory file holding `data` (memfd), for readers that take a path; closed on destruction.
class MemFile {
 public:
  MemFile(const std::uint8_t* data, std::size_t size) {
    fd_ = memfd_create("fuzz-input", MFD_CLOEXEC);
    if (fd_ < 0) std::abort();
    for (std::size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// A fresh private directory for targets that need real files (HDF5, run directories): under
// $TMPDIR (tmpfs is fastest), removed on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/cnn-fuzz.XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cnn::fuzz
