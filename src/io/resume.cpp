#include "cnn/resume.hpp"

#include <filesystem>
#include <iostream>
#include <sstream>
#include <type_traits>

#include "cnn/collective_errors.hpp"
#include "cnn/config.hpp"  // kResumeAuto
#include "cnn/lr_schedule.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/errors.hpp"

namespace cnn {

namespace {

// FNV-1a 64, the same hash as DataSplits::digest(), so a run on the whole data set and the digest of
// a DataSplits with an empty test split agree.
constexpr std::uint64_t kFnvOffsetBasis = 14695981039346656037ULL;
constexpr std::uint64_t kFnvPrime = 1099511628211ULL;

std::uint64_t fnv1a(std::uint64_t hash, const std::vector<std::uint8_t>& bytes) {
  for (const std::uint8_t b : bytes) hash = (hash ^ b) * kFnvPrime;
  return hash;
}

template <typename T>
std::string text(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string shape_text(const TensorShape& s) {
  return text(s.channels) + "x" + text(s.height) + "x" + text(s.width);
}

// A checkpoint written by a run lives in RUN_DIR/checkpoints/NAME.h5.
std::string run_dir_of(const std::string& checkpoint_path) {
  namespace fs = std::filesystem;
  std::error_code ignored;
  return fs::weakly_canonical(fs::path(checkpoint_path).parent_path().parent_path(), ignored).string();
}

std::string canonical_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ignored;
  return fs::weakly_canonical(fs::path(dir), ignored).string();
}

// Reads and checks one candidate on rank 0. Refusals throw UsageError; damaged files InputError/IoError.
CheckpointState load_candidate(const std::string& path, const CheckpointConfig& now, const ParamLayout& layout,
                               std::vector<std::string>& notes) {
  const CheckpointReader reader(path);  // read and verified once
  const ResumeVerdict verdict = check_resume(reader.config(), now);
  if (!verdict.refusal.empty()) throw UsageError("cannot resume from " + path + ": " + verdict.refusal);
  CheckpointState state = reader.read(layout);  // layout of `now`, which matches the saved config now
  notes = verdict.notes;
  return state;
}

// The rank-0 half of resolve_resume: which file, read and checked. Prints notes and warnings.
ResumePoint find_on_root(const ResumeOptions& config, const CheckpointConfig& now, const ParamLayout& layout) {
  ResumePoint point;
  std::vector<std::string> notes;
  if (config.resume != kResumeAuto) {
    point.state = load_candidate(config.resume, now, layout, notes);
    point.path = config.resume;
  } else {
    for (const std::string& candidate : CheckpointDir(config.out_dir).list()) {
      try {
        point.state = load_candidate(candidate, now, layout, notes);
        point.path = candidate;
        break;
      } catch (const InputError& e) {  // every failed check of a file: one line each, then the one before it
        std::cerr << "warning: skipping unreadable checkpoint: " << e.what() << "\n";
      } catch (const IoError& e) {
        std::cerr << "warning: skipping unreadable checkpoint: " << e.what() << "\n";
      }
    }
    if (point.path.empty()) {
      std::cout << "resume: no valid checkpoint in " << CheckpointDir(config.out_dir).dir()
                << ", starting fresh\n";
      return point;
    }
  }
  point.resumed = true;
  const std::string from_dir = run_dir_of(point.path);
  point.from_out_dir = from_dir == canonical_dir(config.out_dir);
  if (!point.from_out_dir) notes.push_back("resume: out " + from_dir + " -> " + config.out_dir);
  for (const std::string& note : notes) std::cout << note << "\n";
  if (!point.state.verified_whole) std::cout << version1_note(point.path) << "\n";
  const CheckpointProgress& p = point.state.progress;
  std::cout << "resume: from " << point.path << " (epochs done " << p.epoch << ", step in epoch " << p.step_in_epoch
            << ", global step " << p.global_step << ", saved by " << p.world_size_at_save << " rank(s))\n";
  std::cout.flush();
  return point;
}

template <typename T>
void broadcast_pod(const MpiWorld& world, T& value) {
  static_assert(std::is_trivially_copyable_v<T>, "broadcast as bytes");
  world.broadcast(&value, static_cast<std::int64_t>(sizeof(T)));
}

void broadcast_floats(const MpiWorld& world, std::vector<float>& values) {
  std::int64_t count = static_cast<std::int64_t>(values.size());
  broadcast_pod(world, count);
  values.resize(static_cast<std::size_t>(count));
  world.broadcast(values.data(), count * static_cast<std::int64_t>(sizeof(float)));
}

}  // namespace

std::string version1_note(const std::string& path) {
  return "note: " + path + " is a version-1 checkpoint: verified by dataset checksums only, not whole";
}

std::uint64_t training_data_digest(const Dataset& train) {
  return fnv1a(fnv1a(kFnvOffsetBasis, train.labels), train.images);
}

ResumeVerdict check_resume(const CheckpointConfig& saved, const CheckpointConfig& now) {
  ResumeVerdict v;
  auto refuse = [&](const std::string& what, const std::string& was, const std::string& is, const char* why) {
    if (v.refusal.empty()) v.refusal = what + " was " + was + ", this run has " + is + " (" + why + ")";
  };
  constexpr const char* kShape = "the saved parameters would not fit the model";
  constexpr const char* kExact = "the continuation would not be exact; start a new run with another --out";
  // The spec, not the --model text: "seed" and its spelled-out layers are the same network, and
  // --filters matters only through the spec.
  if (saved.spec != now.spec) refuse("model", "'" + saved.spec + "'", "'" + now.spec + "'", kShape);
  if (saved.input.channels != now.input.channels || saved.input.height != now.input.height ||
      saved.input.width != now.input.width)
    refuse("input shape", shape_text(saved.input), shape_text(now.input), kShape);
  if (saved.classes != now.classes) refuse("classes", text(saved.classes), text(now.classes), kShape);
  if (saved.seed != now.seed) refuse("seed", text(saved.seed), text(now.seed), kExact);
  if (saved.global_batch != now.global_batch)
    refuse("global batch", text(saved.global_batch), text(now.global_batch), kExact);
  if (saved.optimizer != now.optimizer) refuse("optimizer", saved.optimizer, now.optimizer, kExact);
  if (saved.dataset != now.dataset) refuse("dataset", saved.dataset, now.dataset, kExact);
  if (saved.train_samples != now.train_samples)
    refuse("training images", text(saved.train_samples), text(now.train_samples), kExact);
  if (saved.dataset_digest != now.dataset_digest)
    refuse("training data digest", text(saved.dataset_digest), text(now.dataset_digest), kExact);
  // The options of docs/TRAINING.md change the update or the loss from here on: refused, as the optimizer.
  if (saved.lr_schedule != now.lr_schedule) refuse("lr schedule", saved.lr_schedule, now.lr_schedule, kExact);
  if (saved.warmup_steps != now.warmup_steps)
    refuse("warm-up steps", text(saved.warmup_steps), text(now.warmup_steps), kExact);
  if (saved.weight_decay != now.weight_decay)
    refuse("weight decay", text(saved.weight_decay), text(now.weight_decay), kExact);
  if (saved.nesterov != now.nesterov)
    refuse("nesterov", saved.nesterov ? "on" : "off", now.nesterov ? "on" : "off", kExact);
  if (saved.bn_local != now.bn_local)
    refuse("bn statistics", saved.bn_local ? "local (--bn-local)" : "global", now.bn_local ? "local (--bn-local)" : "global",
           kExact);
  if (saved.label_smoothing != now.label_smoothing)
    refuse("label smoothing", text(saved.label_smoothing), text(now.label_smoothing), kExact);
  if (saved.augment != now.augment) refuse("augment", saved.augment, now.augment, kExact);
  // cosine and onecycle set each step's lr from the run's total steps: other --epochs would change the
  // lr of the steps still to run (constant and step do not depend on it, so they allow it).
  const LrScheduleKind schedule = parse_lr_schedule(now.lr_schedule).kind;
  if (saved.lr_schedule == now.lr_schedule && depends_on_total_steps(schedule) && saved.total_steps != now.total_steps)
    refuse(std::string("--lr-schedule ") + lr_schedule_name(schedule) + "'s total steps",
           text(saved.total_steps) + " (--epochs " + text(saved.epochs) + ")",
           text(now.total_steps) + " (--epochs " + text(now.epochs) + ")",
           "it sets every step's lr from the run's total; keep --epochs, or start a new run with another --out");

  if (saved.lr != now.lr) v.notes.push_back("resume: lr " + text(saved.lr) + " -> " + text(now.lr));
  if (saved.optimizer == optimizer_name(OptimizerKind::kMomentum) && saved.momentum != now.momentum)
    v.notes.push_back("resume: momentum " + text(saved.momentum) + " -> " + text(now.momentum));
  if (saved.optimizer == optimizer_name(OptimizerKind::kAdam) || saved.optimizer == optimizer_name(OptimizerKind::kAdamW)) {
    if (saved.beta1 != now.beta1) v.notes.push_back("resume: beta1 " + text(saved.beta1) + " -> " + text(now.beta1));
    if (saved.beta2 != now.beta2) v.notes.push_back("resume: beta2 " + text(saved.beta2) + " -> " + text(now.beta2));
    if (saved.eps != now.eps) v.notes.push_back("resume: eps " + text(saved.eps) + " -> " + text(now.eps));
  }
  // Another precision changes the rounding of the products from here on, not the state: allowed, and said.
  if (saved.precision != now.precision)
    v.notes.push_back("resume: precision " + saved.precision + " -> " + now.precision +
                      " (the continuation is not bitwise the run it would have been)");
  if (saved.epochs != 0 && saved.epochs != now.epochs)
    v.notes.push_back("resume: epochs " + text(saved.epochs) + " -> " + text(now.epochs));
  return v;
}

ResumePoint resolve_resume(const ResumeOptions& config, const MpiWorld& world, const CheckpointConfig& now,
                           const ParamLayout& layout) {
  ResumePoint point;
  if (config.resume.empty()) return point;
  agree_or_stop(world, [&] {
    if (world.rank() == 0) point = find_on_root(config, now, layout);
  });
  // Everyone continues from rank 0's reading: the same bytes, so the same parameters.
  int resumed = point.resumed ? 1 : 0;
  broadcast_pod(world, resumed);
  point.resumed = resumed != 0;
  if (!point.resumed) return point;
  point.path = world.broadcast_string(point.path);
  point.state.run_id = world.broadcast_string(point.state.run_id);
  broadcast_pod(world, point.state.verified_whole);
  broadcast_pod(world, point.state.progress);
  broadcast_pod(world, point.state.metrics);
  broadcast_pod(world, point.state.optimizer_step);
  broadcast_floats(world, point.state.params);
  broadcast_floats(world, point.state.optimizer_state);
  broadcast_floats(world, point.state.bn_running);
  const std::string step_path = world.broadcast_string(point.state.config.step_path);
  if (world.rank() != 0) point.state.config = now;  // checked equal where it matters, on rank 0
  point.state.config.step_path = step_path;          // auto's path, taken again (chunk_plan.hpp)
  return point;
}

}  // namespace cnn
