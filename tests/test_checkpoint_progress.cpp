// A checkpoint's /progress, /optimizer step and /metrics, range-checked against the file's own
// /config before a resume uses them: each value out of range refused with one clear error, the file
// left as it was; what the trainer really writes passes.
#define BOOST_TEST_MODULE checkpoint_progress
#include "boost_test.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include "checkpoint_test_files.hpp"
#include "cnn/checkpoint.hpp"
#include "cnn/errors.hpp"

using namespace cnn;
using namespace cnn::checkpoint_test;  // tests/checkpoint_test_files.hpp

BOOST_AUTO_TEST_SUITE(bad_input)

// ---- /progress, /optimizer and /metrics against the file's own /config --------------------------------

// make_state's config: 60000 images in batches of 1000, so 60 steps per epoch; progress {3, 17, 197, ...}.
void check_progress_refused(const std::string& expected, void (*change)(CheckpointState&)) {
  Fixture f;
  CheckpointState state = make_state(f.layout, "momentum", kFilters);
  change(state);
  write_checkpoint(f.path, state, f.layout);  // the writer stores what it is given; the reader judges
  BOOST_TEST_CONTEXT(expected) {
    expect_failure<InputError>(f.path, expected, [&] { read_checkpoint(f.path, f.layout); });
  }
}

BOOST_AUTO_TEST_CASE(every_progress_value_is_range_checked) {
  check_progress_refused("/progress step_in_epoch -1 is out of range (0..59 for 60000 images in batches of 1000)",
                         [](CheckpointState& s) { s.progress.step_in_epoch = -1; });
  check_progress_refused("/progress step_in_epoch 60 is out of range",
                         [](CheckpointState& s) { s.progress.step_in_epoch = 60; });
  check_progress_refused("/progress epoch -1 is out of range", [](CheckpointState& s) { s.progress.epoch = -1; });
  check_progress_refused("/progress epoch 4611686018427387904 is out of range",
                         [](CheckpointState& s) { s.progress.epoch = std::int64_t{1} << 62; });
  check_progress_refused("/progress global_step 198 does not match epoch 3 and step_in_epoch 17 (expected 197)",
                         [](CheckpointState& s) { s.progress.global_step = s.optimizer_step = 198; });
  check_progress_refused("/progress samples_seen 196999 does not match",
                         [](CheckpointState& s) { s.progress.samples_seen -= 1; });
  check_progress_refused("/progress world_size_at_save 0 is out of range (1..1000)",
                         [](CheckpointState& s) { s.progress.world_size_at_save = 0; });
  check_progress_refused("/optimizer step 196 does not match /progress global_step 197",
                         [](CheckpointState& s) { s.optimizer_step = 196; });
  check_progress_refused("/progress epoch_loss_sum nan is not a finite",
                         [](CheckpointState& s) { s.progress.epoch_loss_sum = std::nan(""); });
  check_progress_refused("/progress epoch_loss_sum -1 is not a finite, non-negative number",
                         [](CheckpointState& s) { s.progress.epoch_loss_sum = -1.0; });
  check_progress_refused("epoch_correct 11 and epoch_samples 10 are out of range", [](CheckpointState& s) {
    s.progress.epoch_correct = 11;
    s.progress.epoch_samples = 10;
  });
  check_progress_refused("(0 <= correct <= samples <= 17000 after 17 step(s))",
                         [](CheckpointState& s) { s.progress.epoch_samples = 17001; });
  check_progress_refused("/progress epoch_loss_sum 2.5 is not 0 at an epoch boundary", [](CheckpointState& s) {
    s.progress = {4, 0, 240, 240000, 4, 2.5, 0, 0};
    s.optimizer_step = 240;
  });
  check_progress_refused("/metrics train_loss inf is not a finite",
                         [](CheckpointState& s) { s.metrics.train_loss = HUGE_VAL; });
  check_progress_refused("/metrics test_loss -0.5 is not a finite, non-negative number",
                         [](CheckpointState& s) { s.metrics.test_loss = -0.5; });
  check_progress_refused("/metrics test_accuracy 1.5 is out of range (0..1)",
                         [](CheckpointState& s) { s.metrics.test_accuracy = 1.5; });
}

// What the trainer really writes passes: a mid-epoch save with partial stats (fewer samples than
// steps x batch after --on-nonfinite skip), an epoch boundary, the end of a one-epoch run, a last
// batch that is smaller than the others.
BOOST_AUTO_TEST_CASE(checkpoints_the_trainer_writes_pass) {
  Fixture f;
  CheckpointState state = make_state(f.layout, "momentum", kFilters);
  state.progress = {3, 17, 197, 197000, 4, 1234.5, 12000, 16000};
  write_checkpoint(f.path, state, f.layout);
  BOOST_CHECK_EQUAL(read_checkpoint(f.path, f.layout).progress.epoch_samples, 16000);
  state.config.train_samples = 2050;  // 3 steps per epoch: 1000, 1000, 50
  state.progress = {1, 0, 3, 2050, 1};
  state.optimizer_step = 3;
  write_checkpoint(f.path, state, f.layout);
  BOOST_CHECK_EQUAL(read_checkpoint(f.path, f.layout).progress.samples_seen, 2050);
  state.progress = {1, 2, 5, 4050, 1000, 0.0, 0, 0};  // 1000 ranks; every step skipped so far
  state.optimizer_step = 5;
  state.metrics = {0.0, 0.0, 0.0};
  write_checkpoint(f.path, state, f.layout);
  BOOST_CHECK_EQUAL(read_checkpoint(f.path, f.layout).progress.global_step, 5);
}

BOOST_AUTO_TEST_SUITE_END()
