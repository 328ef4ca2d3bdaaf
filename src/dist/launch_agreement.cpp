#include "cnn/launch_agreement.hpp"

#include <climits>
#include <cstdio>
#include <sstream>

#include "cnn/collective_errors.hpp"

#ifndef CNN_SOURCE_ID
#define CNN_SOURCE_ID "unknown"
#endif

namespace cnn {
namespace {

template <typename T>
std::string text(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Exact: two doubles that print alike at the default 6 digits may still differ.
std::string exact(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

// name \0 value \0 ..., for one broadcast.
std::string serialize(const LaunchSettings& settings) {
  std::string out;
  for (const auto& [name, value] : settings) {
    out += name;
    out += '\0';
    out += value;
    out += '\0';
  }
  return out;
}

LaunchSettings deserialize(const std::string& bytes) {
  LaunchSettings settings;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t name_end = bytes.find('\0', at);
    const std::size_t value_end = bytes.find('\0', name_end + 1);
    settings.emplace_back(bytes.substr(at, name_end - at), bytes.substr(name_end + 1, value_end - name_end - 1));
    at = value_end + 1;
  }
  return settings;
}

// The index of the first pair that differs, INT_MAX when none does.
int first_difference(const LaunchSettings& mine, const LaunchSettings& root) {
  const std::size_t common = std::min(mine.size(), root.size());
  for (std::size_t i = 0; i < common; ++i)
    if (mine[i] != root[i]) return static_cast<int>(i);
  return mine.size() == root.size() ? INT_MAX : static_cast<int>(common);
}

std::string describe_entry(const LaunchSettings& settings, int index, const std::string& name) {
  if (index >= static_cast<int>(settings.size())) return "no " + name;
  const auto& [own_name, value] = settings[static_cast<std::size_t>(index)];
  if (own_name != name) return own_name + " '" + value + "'";
  return "'" + value + "'";
}

std::string resume_mode(const std::string& resume) {
  if (resume.empty()) return "no";
  return resume == kResumeAuto ? "auto" : "a checkpoint path";  // the path itself is rank 0's to read
}

}  // namespace

LaunchSettings settings_that_must_agree(const TrainConfig& c) {
  LaunchSettings s = {
      {"the build", std::string(CNN_VERSION) + " (source " + CNN_SOURCE_ID + ")"},
      {"the command", c.command == Command::kEval ? "eval" : c.command == Command::kPredict ? "predict" : "train"},
      {"--split", c.split},
      {"--dataset", dataset_name(c.dataset)},
      {"--train-samples", text(c.train_samples)},
      {"--test-samples", text(c.test_samples)},
      {"--data-mode", data_mode_name(c.data_mode)},
      {"--stream-window-mb", text(c.stream_window_mb)},
      {"--h5-images", c.h5_images},
      {"--h5-labels", c.h5_labels},
      {"--model", c.model},
      {"--filters", text(c.filters)},
      {"--batch", text(c.batch)},
      {"--epochs", text(c.epochs)},
      {"--lr", exact(c.lr)},
      {"--optimizer", optimizer_name(c.optimizer)},
  };
  if (c.optimizer == OptimizerKind::kMomentum) s.emplace_back("--momentum", exact(c.momentum));
  if (c.optimizer == OptimizerKind::kAdam || c.optimizer == OptimizerKind::kAdamW) {
    s.emplace_back("--beta1", exact(c.beta1));
    s.emplace_back("--beta2", exact(c.beta2));
    s.emplace_back("--eps", exact(c.eps));
  }
  const LaunchSettings rest = {
      {"--lr-schedule", lr_schedule_text(c.lr_schedule)},
      {"--warmup-steps", text(c.warmup_steps)},
      {"--weight-decay", exact(c.weight_decay)},
      {"--nesterov", c.nesterov ? "on" : "off"},
      {"--bn-local", c.bn_local ? "on" : "off"},
      {"--label-smoothing", exact(c.label_smoothing)},
      {"--augment", augment_text(c.augment)},
      {"--seed", text(c.seed)},
      {"--device", device_name(c.device)},
      {"--backend", c.backend ? backend_kind_name(*c.backend) : ""},
      {"--precision", precision_name(c.precision)},
      {"--overlap", overlap_name(c.overlap)},
      {"--allreduce", allreduce_name(c.allreduce)},
      {"--checkpoint-every", text(c.checkpoint_every)},
      {"--checkpoint-every-steps", text(c.checkpoint_every_steps)},
      {"--resume", resume_mode(c.resume)},
      {"--trace", c.trace.empty() ? "off" : "on, steps " + c.trace_steps},
      {"--on-nonfinite", nonfinite_policy_name(c.on_nonfinite)},
  };
  s.insert(s.end(), rest.begin(), rest.end());
  return s;
}

LaunchSettings data_identity(const TrainingData& data) {
  const TensorShape& shape = data.shape();
  return {
      {"the training images", text(data.train_count())},
      {"the test images", text(data.test_count())},
      {"the image shape", text(shape.channels) + "x" + text(shape.height) + "x" + text(shape.width)},
      {"the classes", text(data.classes())},
      {"the training data digest", text(data.train_digest())},
  };
}

void agree_on_settings(const MpiWorld& world, const LaunchSettings& mine) {
  if (world.size() == 1) return;
  const LaunchSettings root = deserialize(world.broadcast_string(serialize(mine)));
  const int differs_at = first_difference(mine, root);
  const int first = world.allreduce_min(differs_at);
  if (first == INT_MAX) return;
  // The lowest rank that differs at that setting tells rank 0 what it has.
  const int who = world.allreduce_min(differs_at == first ? world.rank() : world.size());
  const std::string name = first < static_cast<int>(root.size()) ? root[static_cast<std::size_t>(first)].first
                                                                  : mine[static_cast<std::size_t>(first)].first;
  const std::string theirs = world.broadcast_string(world.rank() == who ? describe_entry(mine, first, name) : "", who);
  if (world.rank() == 0) {
    print_error_line("ranks disagree on " + name + ": rank 0 has " + describe_entry(root, first, name) + ", rank " +
                     std::to_string(who) + " has " + theirs +
                     "; every rank must run the same training (check the launch line or the per-node wrapper)");
  }
  throw AlreadyReported(ExitCode::kUsage);
}

}  // namespace cnn
