// Continuing a run from a checkpoint (--resume PATH | auto).
//
// Rank 0 finds and reads the checkpoint and checks it against this run's settings; every rank then
// receives the same state by broadcast, so all continue from identical parameters and progress.
// What may change between the stop and the resume is decided here (docs/CHECKPOINT.md, "Resuming"):
//   refused (exit 2): model spec, input shape, classes (the parameters would not fit);
//                     seed, global batch, optimizer, data, lr schedule, warm-up, weight decay,
//                     nesterov, label smoothing (the continuation would not be exact); epochs with
//                     a cosine or onecycle schedule (its lr depends on the run's total steps)
//   allowed, printed: lr, momentum, adam betas and eps, epochs, output directory
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cnn/checkpoint.hpp"
#include "cnn/communicator.hpp"
#include "cnn/dataset.hpp"

namespace cnn {

// FNV-1a of the training split's labels then images: identifies the data a run trains on. The test
// split is left out on purpose, so that --test-samples may change on resume.
std::uint64_t training_data_digest(const Dataset& train);

struct ResumeVerdict {
  std::string refusal;             // empty: compatible
  std::vector<std::string> notes;  // "resume: lr 0.1 -> 0.05", one per allowed change
};

// Compares the checkpoint's /config (`saved`) with this run's (`now`). Pure: no I/O.
ResumeVerdict check_resume(const CheckpointConfig& saved, const CheckpointConfig& now);

// The one line eval and --resume print on stdout for a version-1 file, which has no whole-file digest.
std::string version1_note(const std::string& path);

struct ResumePoint {
  bool resumed = false;
  std::string path;       // the checkpoint resumed from ("" when fresh)
  bool from_out_dir = false;  // rank 0: the checkpoint lies in --out's own checkpoints/
  CheckpointState state;  // progress all zero when fresh
};

// Resolves config.resume on rank 0 and hands the result to every rank. Throws AlreadyReported
// (the message printed once) for a missing or invalid file given as PATH (exit 3 / 2) and for a
// refused change of settings (exit 2). With `auto`, a corrupt newest file is skipped with one
// warning line and the one before it is tried; none at all means a fresh start, said once.
// What resolve_resume reads of the options.
struct ResumeOptions {
  std::string resume;   // --resume: "" (fresh), kResumeAuto or a checkpoint path
  std::string out_dir;  // --out: where `auto` looks
};

ResumePoint resolve_resume(const ResumeOptions& config, const MpiWorld& world, const CheckpointConfig& now,
                           const ParamLayout& layout);

}  // namespace cnn
