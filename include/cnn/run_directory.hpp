// Who may write into a run directory, decided before anything is written (docs/RELIABILITY.md,
// "The run directory is owned").
//
//   RUN_DIR/run.lock   flock(2)ed by rank 0 for the whole run; the kernel releases it when the holder
//                      dies, so flock alone decides. The host, pid and start time written in it are only
//                      for the message a second run prints. The file stays after the run.
//   RUN_DIR/run_id     a random id drawn when the run first starts, kept by every resume of it and
//                      stored in every checkpoint, so that `--resume PATH --out DIR` can tell whether
//                      DIR holds the same run or another one.
//
// The rules: a directory that holds any earlier run (checkpoints, runs.log, metrics, ...) is refused
// without --resume; --resume auto continues the directory's own run; --resume PATH writes into --out
// only when --out is new or holds the run the checkpoint belongs to.
#pragma once

#include <string>

namespace cnn {

// What a run directory holds, read without writing anything.
struct RunDirContents {
  bool exists = false;
  std::string earlier_run;     // the first file found that shows an earlier run ("" when none)
  bool has_checkpoints = false;  // RUN_DIR/checkpoints holds anything
  std::string run_id;          // RUN_DIR/run_id ("" when absent: new, or written before run ids existed)
};

// How this start continues (or does not continue) a run.
struct ResumeRequest {
  enum class Mode { kNone, kAuto, kPath } mode = Mode::kNone;
  bool resumed = false;             // a checkpoint was found and accepted
  std::string checkpoint_run_id;    // that checkpoint's run id ("" for a version-1 checkpoint)
  bool checkpoint_in_out = false;   // the checkpoint lies in --out's own checkpoints/
};

// The run id this start writes under, or UsageError (exit 2) with the reason. Pure: tested alone.
std::string admit_run(const std::string& dir, const RunDirContents& contents, const ResumeRequest& request,
                      const std::string& fresh_id);

// A new random run id: 32 hex digits from getrandom(2).
std::string new_run_id();

// `--trace FILE` must name a file that does not exist yet, in a directory that exists (or is the run
// directory, which the run creates) and is writable. Checked before anything is created; throws
// UsageError (the file exists) or IoError.
void check_trace_target(const std::string& trace, const std::string& run_dir);

class RunDirectory {
 public:
  explicit RunDirectory(std::string dir);
  ~RunDirectory();  // closing the lock file releases the lock
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  RunDirContents inspect() const;

  // Rank 0, before anything else is written: admits the start (admit_run) on what the directory holds,
  // creates it, takes the lock (UsageError naming the holder if another run has it), admits again under
  // the lock (a run that started meanwhile), then records the holder and the run id. Returns the run id.
  std::string claim(const ResumeRequest& request);

  const std::string& dir() const { return dir_; }

 private:
  bool try_lock(int create_flag);
  [[noreturn]] void refuse_busy() const;
  std::string dir_;
  int lock_fd_ = -1;
};

}  // namespace cnn
