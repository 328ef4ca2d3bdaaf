// Durable file replacement on POSIX: a reader sees either the old file or the complete new one,
// never a partial one, even after a crash or power loss. rename(2) alone is atomic but not durable:
// the data must be fsynced before the rename, and the directory entry after it.
#pragma once

#include <cstddef>
#include <string>

namespace cnn::fsutil {

// strerror(err), thread-safe.
std::string errno_text(int err);

// The directory holding `path` ("." for a bare name).
std::string parent_dir(const std::string& path);

// Opens `path` read-only and fsyncs it. Throws IoError naming the path.
void fsync_file(const std::string& path);

// fsyncs a directory, so that a rename or unlink inside it survives a crash. Throws IoError.
void fsync_directory(const std::string& dir);

// fsync(from), rename(from, to), fsync(directory of to). Throws IoError; `to` is untouched then.
void rename_durably(const std::string& from, const std::string& to);

// write(2) until all `size` bytes are written (EINTR retried). Throws IoError naming `path`.
void write_all(int fd, const void* data, std::size_t size, const std::string& path);
void write_all(int fd, const std::string& text, const std::string& path);

// Creates `path` (which must not exist: O_EXCL) and writes `text` into it. Throws IoError naming it.
void write_new_file(const std::string& path, const std::string& text);

// Writes `text` to path + ".tmp" and renames it durably over `path`. Throws IoError; on failure the
// temporary is removed and `path` is untouched.
void write_text_durably(const std::string& path, const std::string& text);

// Test hook CNN_TEST_WRITE_PAUSE_MS=N (TestHooks::write_pause_ms, installed by main through
// set_test_write_pause_ms in test_hooks.hpp): sleeps N ms at each stage of a durable write (inside the HDF5
// file's writing, before and after each rename, before pruning), so that a test's SIGKILL at a random
// time lands inside the write window (tests/safe_write_test.sh). Unset: returns at once.
void test_write_pause();

// mkdir -p: creates each missing component of `dir`. Throws IoError naming the component that cannot be
// created, or `dir` when it exists and is not a directory.
void make_directories(const std::string& dir);

// unlink(2) that treats "already gone" as success. Returns 0 or the errno of the failure.
int remove_if_present(const std::string& path);

}  // namespace cnn::fsutil
