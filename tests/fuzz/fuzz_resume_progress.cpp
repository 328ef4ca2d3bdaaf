// What a resume does with a checkpoint's /progress and /metrics (src/train/trainer.cpp, src/io/resume.cpp).
//
// The input chooses a run's shape (training images, global batch, --epochs) and the values of every
// /progress counter, /optimizer step and /metrics value: near a consistent point of the run (an epoch
// and step, then one field pushed off by a small or a huge amount) or any 64-bit pattern. Our writer
// stores them in a sealed version-2 checkpoint and our reader reads it back. A refusal (cnn::Error)
// is fine. For every ACCEPTED file the fuzzer then does what the trainer does with it and checks the
// invariants the trainer relies on:
//   - the step and the epoch are within the run: 0 <= step_in_epoch < steps per epoch, epoch >= 0,
//     global_step = epoch * steps + step_in_epoch, samples_seen likewise, the optimizer step equal;
//   - the next checkpoint's name (CheckpointDir::save) has no negative number and lists back with
//     the same global step;
//   - the epoch's sample order (Sampler) is a permutation, and global_batch_range(step_in_epoch) is a
//     non-empty range inside the data;
//   - the training loop from there to --epochs stays in range: no counter overflows;
//   - the partial-epoch stats and the metrics are finite and in range.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "cnn/checkpoint.hpp"
#include "cnn/model.hpp"
#include "cnn/network.hpp"
#include "cnn/sampler.hpp"
#include "fuzz_support.hpp"

namespace {

[[noreturn]] void finding(const char* what, const cnn::CheckpointProgress& p) {
  std::fprintf(stderr, "fuzz: accepted checkpoint breaks an invariant: %s (epoch %lld, step_in_epoch %lld, "
                       "global_step %lld, samples_seen %lld)\n",
               what, static_cast<long long>(p.epoch), static_cast<long long>(p.step_in_epoch),
               static_cast<long long>(p.global_step), static_cast<long long>(p.samples_seen));
  std::abort();
}

// A value near `base`: itself (most often), a small step off, or any 64-bit pattern.
std::int64_t near(std::int64_t base, FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0: {  // base may itself be any pattern (a count near another field): no overflow here
      std::int64_t value = base;
      return __builtin_add_overflow(base, in.ConsumeIntegralInRange<std::int64_t>(-3, 3), &value) ? base : value;
    }
    case 1: return in.ConsumeIntegral<std::int64_t>();
    default: return base;
  }
}

double real(double base, FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0: return in.ConsumeFloatingPoint<double>();  // any double, infinities included
    case 1: return std::numeric_limits<double>::quiet_NaN();
    case 2: return -base - 1.0;
    default: return base;
  }
}

void check_accepted(const cnn::CheckpointState& s, std::int64_t epochs, const std::string& dir,
                    const cnn::ParamLayout& layout) {
  const cnn::CheckpointConfig& c = s.config;
  const cnn::CheckpointProgress& p = s.progress;
  const std::int64_t steps = cnn::batches_per_epoch(c.train_samples, c.global_batch);
  if (p.step_in_epoch < 0 || p.step_in_epoch >= steps) finding("step_in_epoch outside the epoch", p);
  if (p.epoch < 0) finding("negative epoch", p);
  if (p.epoch > std::numeric_limits<int>::max()) finding("an epoch no --epochs can reach", p);
  if (p.global_step != p.epoch * steps + p.step_in_epoch) finding("global_step inconsistent", p);
  if (p.samples_seen != p.epoch * c.train_samples + p.step_in_epoch * c.global_batch) finding("samples_seen", p);
  if (s.optimizer_step != p.global_step) finding("optimizer step differs from global_step", p);
  if (p.world_size_at_save < 1 || p.world_size_at_save > c.global_batch) finding("world_size_at_save", p);
  if (!std::isfinite(p.epoch_loss_sum) || p.epoch_loss_sum < 0) finding("epoch_loss_sum", p);
  if (p.epoch_correct < 0 || p.epoch_correct > p.epoch_samples || p.epoch_samples > p.step_in_epoch * c.global_batch)
    finding("partial-epoch counts", p);
  const cnn::CheckpointMetrics& m = s.metrics;
  if (!std::isfinite(m.train_loss) || m.train_loss < 0 || !std::isfinite(m.test_loss) || m.test_loss < 0 ||
      !(m.test_accuracy >= 0 && m.test_accuracy <= 1))
    finding("metrics", p);

  // The next checkpoint's name, as the trainer's next save makes it, must list back.
  const cnn::CheckpointDir checkpoints(dir + "/run");
  checkpoints.prepare();
  const std::string written = checkpoints.save(s, layout, 1);
  if (written.find("-e-") != std::string::npos || written.find("-s-") != std::string::npos)
    finding("a negative number in the checkpoint's name", p);
  const std::vector<std::string> listed = checkpoints.list();
  if (listed.size() != 1 || listed[0] != written) finding("the checkpoint's name does not list back", p);

  // What the loop does first: the epoch's order, the step's batch.
  const cnn::Sampler sampler(c.seed, c.train_samples);
  const std::vector<std::int32_t> order = sampler.permutation(p.epoch);
  std::vector<bool> seen(order.size(), false);
  for (const std::int32_t i : order) {
    if (i < 0 || i >= static_cast<std::int32_t>(order.size()) || seen[static_cast<std::size_t>(i)])
      finding("the epoch's order is not a permutation", p);
    seen[static_cast<std::size_t>(i)] = true;
  }
  const cnn::Range batch = cnn::global_batch_range(p.step_in_epoch, c.train_samples, c.global_batch);
  if (batch.begin < 0 || batch.count < 1 || batch.begin + batch.count > c.train_samples)
    finding("the step's batch is outside the data", p);
  // The loop's bounds to the end of the run: the counters it advances stay in range.
  if (p.epoch < epochs) {
    std::int64_t remaining = 0;
    std::int64_t last_step = 0;
    if (__builtin_mul_overflow(epochs - p.epoch, steps, &remaining) ||
        __builtin_add_overflow(p.global_step, remaining - p.step_in_epoch, &last_step) || last_step < p.global_step)
      finding("the run's remaining steps overflow global_step", p);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  cnn::CheckpointState state;
  cnn::CheckpointConfig& c = state.config;
  c.model = "seed";
  c.filters = 1;
  c.input = {1, 4, 4};
  c.classes = 2;
  c.train_samples = in.ConsumeIntegralInRange<std::int64_t>(1, 3000);
  c.global_batch = in.ConsumeIntegralInRange<std::int64_t>(1, c.train_samples + 100);
  c.lr = 0.1;
  c.optimizer = "sgd";
  c.seed = in.ConsumeIntegral<std::uint64_t>();
  c.dataset = "fashion";
  const std::int64_t epochs = in.ConsumeIntegralInRange<std::int64_t>(1, 1000);
  c.epochs = epochs;
  const cnn::Network network = cnn::build_network(c.model, c.filters, c.input, c.classes);
  c.spec = network.spec;
  state.params.assign(static_cast<std::size_t>(network.layout.total()), 0.5f);

  // A consistent point of the run, then every field possibly pushed off it.
  const std::int64_t steps = cnn::batches_per_epoch(c.train_samples, c.global_batch);
  const std::int64_t epoch = in.ConsumeIntegralInRange<std::int64_t>(0, epochs);
  const std::int64_t step = epoch == epochs ? 0 : in.ConsumeIntegralInRange<std::int64_t>(0, steps - 1);
  cnn::CheckpointProgress& p = state.progress;
  p.epoch = near(epoch, in);
  p.step_in_epoch = near(step, in);
  p.global_step = near(epoch * steps + step, in);
  p.samples_seen = near(epoch * c.train_samples + step * c.global_batch, in);
  p.world_size_at_save = static_cast<int>(near(in.ConsumeIntegralInRange<std::int64_t>(1, 4), in));
  const std::int64_t trained = step * c.global_batch;
  p.epoch_samples = near(trained - in.ConsumeIntegralInRange<std::int64_t>(0, trained), in);
  p.epoch_correct = near(in.ConsumeIntegralInRange<std::int64_t>(0, std::max<std::int64_t>(p.epoch_samples, 0)), in);
  p.epoch_loss_sum = real(step == 0 ? 0.0 : 0.7 * static_cast<double>(trained), in);
  state.optimizer_step = near(p.global_step, in);
  state.metrics = {real(0.6, in), real(0.65, in), real(0.8, in)};
  if (in.ConsumeBool()) state.metrics.test_accuracy = in.ConsumeFloatingPoint<double>();

  const cnn::fuzz::TempDir dir;
  const std::string path = dir.path() + "/ckpt.h5";
  cnn::write_checkpoint(path, state, network.layout);
  cnn::CheckpointState read;
  try {
    read = cnn::read_checkpoint(path, network.layout);
  } catch (const cnn::Error&) {
    return 0;  // refused: the documented outcome for a value out of range
  }
  cnn::fuzz::expect_clean([&] { check_accepted(read, epochs, dir.path(), network.layout); });
  return 0;
}
