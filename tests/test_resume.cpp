// What may change between a stop and a resume (check_resume), and the run log's resume mode
// (rows after the checkpoint's epoch dropped, the rest kept; runs.log appended).
#define BOOST_TEST_MODULE resume
#include "boost_test.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "cnn/errors.hpp"
#include "checkpoint_fixtures.hpp"
#include "cnn/resume.hpp"
#include "cnn/run_log.hpp"

namespace fs = std::filesystem;
using namespace cnn;

namespace {

CheckpointConfig saved_config() {
  CheckpointConfig c = cnn::test::seed_momentum_config(8, 1, 1234, 2000);
  c.epochs = 3;
  return c;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

BOOST_AUTO_TEST_CASE(identical_settings_resume_silently) {
  const ResumeVerdict v = check_resume(saved_config(), saved_config());
  BOOST_TEST(v.refusal.empty());
  BOOST_TEST(v.notes.empty());
}

BOOST_AUTO_TEST_CASE(model_shape_changes_are_refused_by_name) {
  CheckpointConfig now = saved_config();
  now.filters = 16;
  now.spec = preset_spec("seed", 16, 10);
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal,
                      "model was 'conv3x3:8 relu maxpool2 fc:10', this run has 'conv3x3:16 relu maxpool2 fc:10'"));
  now = saved_config();
  now.model = "cifar";
  now.spec = preset_spec("cifar", 8, 10);
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "model was 'conv3x3:8"));
  now = saved_config();
  now.input = {3, 32, 32};
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "input shape was 1x28x28, this run has 3x32x32"));
  now = saved_config();
  now.classes = 100;
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "classes was 10"));
}

BOOST_AUTO_TEST_CASE(the_same_network_spelled_out_resumes) {
  CheckpointConfig now = saved_config();
  now.model = "conv3x3:8 relu maxpool2 flatten fc:10";  // the canonical spec is what counts
  BOOST_TEST(check_resume(saved_config(), now).refusal.empty());
}

BOOST_AUTO_TEST_CASE(changes_that_break_exact_continuation_are_refused) {
  CheckpointConfig now = saved_config();
  now.seed = 2;
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "seed was 1, this run has 2"));
  now = saved_config();
  now.global_batch = 200;
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "global batch was 100"));
  now = saved_config();
  now.optimizer = "sgd";
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "optimizer was momentum"));
  now = saved_config();
  now.dataset_digest = 99;
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "training data digest"));
}

BOOST_AUTO_TEST_CASE(lr_and_epochs_may_change_and_are_printed) {
  CheckpointConfig now = saved_config();
  now.lr = 0.05;
  now.epochs = 5;
  const ResumeVerdict v = check_resume(saved_config(), now);
  BOOST_TEST(v.refusal.empty());
  BOOST_REQUIRE(v.notes.size() == 2u);
  BOOST_TEST(v.notes[0] == "resume: lr 0.1 -> 0.05");
  BOOST_TEST(v.notes[1] == "resume: epochs 3 -> 5");
}

// The options of docs/TRAINING.md change the update or the loss from the resumed step on: refused.
BOOST_AUTO_TEST_CASE(schedule_decay_nesterov_and_smoothing_changes_are_refused) {
  CheckpointConfig now = saved_config();
  now.lr_schedule = "cosine";
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "lr schedule was constant, this run has cosine"));
  now = saved_config();
  now.warmup_steps = 10;
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "warm-up steps was 0, this run has 10"));
  now = saved_config();
  now.weight_decay = 5e-4;
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "weight decay was 0, this run has 0.0005"));
  now = saved_config();
  now.nesterov = true;
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "nesterov was off, this run has on"));
  now = saved_config();
  now.label_smoothing = 0.1;
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "label smoothing was 0, this run has 0.1"));
  now = saved_config();
  now.augment = "crop:4";  // --augment changes the batches from the resumed step on
  BOOST_TEST(contains(check_resume(saved_config(), now).refusal, "augment was none, this run has crop:4"));
}

// cosine and onecycle set every step's lr from the run's total steps; constant and step do not.
BOOST_AUTO_TEST_CASE(other_epochs_are_refused_with_cosine_and_onecycle_only) {
  for (const char* schedule : {"cosine", "onecycle"}) {
    CheckpointConfig saved = saved_config();
    saved.lr_schedule = schedule;
    saved.total_steps = 60;  // 3 epochs of 20 steps
    CheckpointConfig now = saved;
    now.epochs = 4;
    now.total_steps = 80;
    BOOST_TEST(contains(check_resume(saved, now).refusal,
                        std::string("--lr-schedule ") + schedule +
                            "'s total steps was 60 (--epochs 3), this run has 80 (--epochs 4)"),
               check_resume(saved, now).refusal);
    BOOST_TEST(check_resume(saved, saved).refusal.empty());
  }
  for (const char* schedule : {"constant", "step:2/0.1"}) {
    CheckpointConfig saved = saved_config();
    saved.lr_schedule = schedule;
    saved.total_steps = 60;
    CheckpointConfig now = saved;
    now.epochs = 4;
    now.total_steps = 80;
    const ResumeVerdict v = check_resume(saved, now);
    BOOST_TEST(v.refusal.empty(), schedule << ": " << v.refusal);
    BOOST_REQUIRE(v.notes.size() == 1u);
    BOOST_TEST(v.notes[0] == "resume: epochs 3 -> 4");
  }
}

// A checkpoint written before these options existed holds none of them: the reader's defaults, which
// are what such a run used, resume against a run that leaves them off.
BOOST_AUTO_TEST_CASE(an_older_checkpoints_defaults_resume_with_the_options_off) {
  CheckpointConfig older = saved_config();
  older.total_steps = 0;  // not recorded
  CheckpointConfig now = saved_config();
  now.total_steps = 60;
  BOOST_TEST(check_resume(older, now).refusal.empty());
}

BOOST_AUTO_TEST_CASE(another_precision_is_allowed_and_printed) {
  CheckpointConfig now = saved_config();
  now.precision = "bf16";
  const ResumeVerdict v = check_resume(saved_config(), now);
  BOOST_TEST(v.refusal.empty());
  BOOST_REQUIRE(v.notes.size() == 1u);
  BOOST_TEST(v.notes[0] == "resume: precision fp32 -> bf16 (the continuation is not bitwise the run it would have been)");
}

BOOST_AUTO_TEST_CASE(training_digest_matches_the_data_sets_own) {
  DataSplits splits;
  splits.train.labels = {1, 2, 3};
  splits.train.images = {9, 8, 7, 6, 5, 4};
  BOOST_TEST(training_data_digest(splits.train) == splits.digest());  // empty test split adds nothing
}

BOOST_AUTO_TEST_CASE(prepare_resume_drops_rows_after_the_checkpoint) {
  std::string pattern = (fs::temp_directory_path() / "cnn_resume_XXXXXX").string();
  BOOST_REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  const fs::path dir = pattern;
  const RunLog log(dir.string());
  log.prepare();
  for (int epoch = 1; epoch <= 3; ++epoch) {
    EpochMetrics m;
    m.epoch = epoch;
    log.append_epoch(m, {PhaseSpread{}});
  }
  BOOST_CHECK_THROW(log.prepare(), UsageError);  // a fresh start never overwrites a run
  log.prepare_resume(2);
  const std::string metrics = read_all(log.metrics_path());
  BOOST_TEST(contains(metrics, "\n1,"));
  BOOST_TEST(contains(metrics, "\n2,"));
  BOOST_TEST(!contains(metrics, "\n3,"));
  BOOST_TEST(!contains(read_all(log.timing_path()), "\n3,"));
  log.append_start("a");
  log.append_start("b");
  BOOST_TEST(read_all(log.runs_path()) == "a\nb\n");
  fs::remove_all(dir);
}
