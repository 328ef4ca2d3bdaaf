// Thin, checked wrappers over the HDF5 C API for the checkpoint code: owned handles, one-line errors
// that name the file, the call and HDF5's innermost reason, and typed scalar attributes.
// Private to src/ (the public contract is include/cnn/checkpoint.hpp).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cnn::h5 {

// libhdf5 as Debian builds it is not thread-safe (H5is_library_threadsafe says false): no two threads
// may be inside the library at once. The asynchronous checkpoint (checkpointer.hpp) builds its file
// on a background thread while the training thread may read a stream-mode data window (in line, or
// on the data loader's thread), so ALL use of libhdf5 in the process is serialised by this one
// process-wide lock, rather than keeping the library to one thread while a write is in flight.
// Recursive: an entry point may call another on the same thread. QuietErrors takes it, and every
// entry point opens with a QuietErrors, so holding one means holding the lock; the few calls outside
// one (a destructor's closes) take a LibraryLock of their own. Only the in-memory build of a
// checkpoint holds it on the writer's thread (a few ms at d=256), not the write(2)s and fsyncs.
class LibraryLock {
 public:
  LibraryLock();
  ~LibraryLock();
  LibraryLock(const LibraryLock&) = delete;
  LibraryLock& operator=(const LibraryLock&) = delete;
};

// HDF5 prints its whole error stack to stderr by default; we report one line ourselves instead.
// Turns that printing off for the lifetime of the object and restores the previous setting after,
// clearing this thread's error stack (the message has been taken from it by then). Holds the
// LibraryLock for its lifetime: it is the first thing every entry point into libhdf5 makes.
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  const LibraryLock lock_;  // first: taken before, released after, the error settings' calls
  H5E_auto2_t saved_func_ = nullptr;
  void* saved_data_ = nullptr;
};

// An owned HDF5 identifier, closed by the matching H5?close. Move-only.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  // Closes now and returns the closer's status, for the one close whose failure matters (the file).
  herr_t close();

 private:
  // Unchecked: runs during unwinding, when the first error is already on its way.
  void reset();
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Which error a failed call becomes: writing a file is an I/O problem (IoError); a file that cannot be
// read back is a content problem (InputError, "truncated or corrupt?").
enum class Mode { kWrite, kRead };

// The file being written or read: turns failures into one-line typed errors naming it.
class FileContext {
 public:
  FileContext(std::string path, Mode mode) : path_(std::move(path)), mode_(mode) {}
  const std::string& path() const { return path_; }

  // Throws "PATH: <what>" as IoError (kWrite) or InputError (kRead).
  [[noreturn]] void fail(const std::string& what) const;
  // Throws for a failed HDF5 call, naming it, the object ("" for the file itself) and HDF5's innermost reason.
  [[noreturn]] void fail_call(const char* call, const std::string& object) const;

  // A negative return is HDF5's failure signal for ids, herr_t and htri_t alike.
  hid_t check(hid_t id, const char* call, const std::string& object) const;
  herr_t check(herr_t status, const char* call, const std::string& object) const;
  Handle own(hid_t id, Handle::Closer closer, const char* call, const std::string& object) const {
    return Handle(check(id, call, object), closer);
  }

 private:
  std::string path_;
  Mode mode_;
};

// An open group or dataset with its absolute path, for messages.
struct Node {
  Handle handle;
  std::string path;
  hid_t id() const { return handle.get(); }
};

// True when every component of the absolute `path` exists as a link (H5Lexists needs each parent).
bool exists(const FileContext& file, hid_t file_id, const std::string& path);

Node create_group(const FileContext& file, hid_t file_id, const std::string& path);
// Fails with "missing group PATH" / "PATH is not a group" in read mode.
Node open_group(const FileContext& file, hid_t file_id, const std::string& path);

// Writes a contiguous, uncompressed float32 dataset in one H5Dwrite; missing parent groups are created.
Node write_float_dataset(const FileContext& file, hid_t file_id, const std::string& path,
                         const std::vector<std::int64_t>& shape, const float* data);
// Checks presence ("missing dataset"), datatype (float32) and shape (exactly `shape`), then reads it
// whole into `out` (product of shape floats). Returns the open dataset.
Node read_float_dataset(const FileContext& file, hid_t file_id, const std::string& path,
                        const std::vector<std::int64_t>& shape, float* out);

// Scalar attributes: strings as variable-length UTF-8, integers as 64-bit, floats as double.
void write_attr(const FileContext& file, const Node& node, const char* name, const std::string& value);
void write_attr(const FileContext& file, const Node& node, const char* name, const char* value);
void write_attr(const FileContext& file, const Node& node, const char* name, std::int64_t value);
void write_attr(const FileContext& file, const Node& node, const char* name, std::uint64_t value);
void write_attr(const FileContext& file, const Node& node, const char* name, double value);
void write_attr(const FileContext& file, const Node& node, const char* name, const std::vector<std::int64_t>& value);

// Readers check presence ("missing attribute") and type class; any integer width is accepted.
std::string read_string_attr(const FileContext& file, const Node& node, const char* name);
std::int64_t read_int64_attr(const FileContext& file, const Node& node, const char* name);
std::uint64_t read_uint64_attr(const FileContext& file, const Node& node, const char* name);
double read_double_attr(const FileContext& file, const Node& node, const char* name);
std::vector<std::int64_t> read_int64_array_attr(const FileContext& file, const Node& node, const char* name,
                                                std::size_t count);

// "[32,1,3,3]"
std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace cnn::h5
