// Where `cnn_mpi predict` writes its CSV (docs/PREDICT.md): a file that must not exist yet, or
// standard output ("-"). A file appears whole or not at all, and never replaces another: the rows go
// to a temporary file beside it (".NAME.XXXXXX.tmp", so on the same file system), which commit()
// fsyncs and links to NAME. link(2) fails with EEXIST rather than replace a file that someone created
// meanwhile (renameat2 with RENAME_NOREPLACE where the file system has no hard links); the temporary
// is removed either way.
#pragma once

#include <string>

namespace cnn {

// --out value that writes the CSV to standard output.
inline constexpr const char* kStandardOutput = "-";

// The checks to make before any work: throws UsageError "PATH: already exists ..." when `path`
// exists (of any type: a link, a FIFO, a directory), IoError when its directory is missing, is not a
// directory or is not writable. Nothing for "-".
void require_new_output(const std::string& path);

class PredictionFile {
 public:
  // Creates the temporary file (IoError naming it when that fails); "-": writes to standard output.
  explicit PredictionFile(const std::string& path);
  ~PredictionFile();  // removes the temporary unless commit() succeeded
  PredictionFile(const PredictionFile&) = delete;
  PredictionFile& operator=(const PredictionFile&) = delete;

  // Appends `text`. Throws IoError naming the file.
  void write(const std::string& text);
  // Makes the file appear under its name, durably (fsync of the file, then of its directory).
  // Throws UsageError when the name exists now (nothing replaced), IoError for any other failure.
  void commit();

 private:
  std::string path_;
  std::string temp_;  // empty for standard output
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace cnn
