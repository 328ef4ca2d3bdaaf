// --config FILE.toml (include/cnn/config_file.hpp): RUN_DIR/config.toml read back gives the same
// settings, the command line overrides the file, and every bad file stops with one line naming the
// file, the line and the key. The tests that read TOML skip, saying so, in a build without toml++.
#define BOOST_TEST_MODULE config_file
#include "boost_test.hpp"

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "cnn/cli.hpp"
#include "cnn/config_file.hpp"
#include "cnn/errors.hpp"
#include "cnn/settings_toml.hpp"
#include "test_files.hpp"

using namespace cnn;
using cnn::test::error_of;
using cnn::test::TempDir;

namespace {

struct ConfigFilesRead {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    if (config_file_support()) return true;
    const std::string message = "SKIP: this build reads no config files: " + config_file_support_text();
    std::cout << message << std::endl;
    boost::test_tools::assertion_result result(false);
    result.message() << message;
    return result;
  }
};

struct ConfigFilesNotRead {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    boost::test_tools::assertion_result result(!config_file_support());
    if (config_file_support()) result.message() << "this build reads config files (" << config_file_support_text() << ")";
    return result;
  }
};

CliResult parse(std::vector<std::string> words) {
  words.insert(words.begin(), "cnn_mpi");
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

TrainConfig resolved(std::vector<std::string> words) {
  TrainConfig config = parse(std::move(words)).config;
  resolve_config(config, 1, 1, -1);
  return config;
}

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

// The message parse() throws as UsageError for a config file holding `text`.
std::string refusal(const std::string& text) {
  TempDir dir;
  const std::string path = write(dir, "bad.toml", text);
  std::string message = error_of<UsageError>([&] { parse({"--config", path}); });
  // The path is the test's own; the rest of the line is what a user reads.
  if (message.rfind(path, 0) == 0) message = "FILE" + message.substr(path.size());
  return message;
}

}  // namespace

// Every option away from its default, and strings that need TOML's escapes: what config.toml holds
// reads back as the same settings.
BOOST_AUTO_TEST_CASE(config_toml_read_back_gives_the_same_settings, *boost::unit_test::precondition(ConfigFilesRead{})) {
  const TrainConfig first = resolved({
      "--data", "/data/\"quoted\" dir\\with\tescapes", "--dataset", "hdf5", "--data-mode", "stream",
      "--stream-window-mb", "32", "--h5-images", "/x/images", "--h5-labels", "/x/labels", "--train-samples", "1000",
      "--test-samples", "200", "--model", "conv3x3:8/p1 relu maxpool2 fc:10", "--filters", "7", "--batch", "64",
      "--epochs", "5", "--lr", "0.0123456789", "--optimizer", "adam", "--momentum", "0.5", "--beta1", "0.8",
      "--beta2", "0.99", "--eps", "1e-7", "--seed", "18446744073709551615", "--device", "cpu", "--backend", "seq",
      "--threads", "1", "--overlap", "off", "--allreduce", "mpi", "--steps-per-launch", "7", "--out", "runs/caf\xc3\xa9\nnext", "--quiet",
      "--trace=-t.json", "--trace-steps", "3:7", "--checkpoint-every", "2", "--checkpoint-every-steps", "100",
      "--keep", "5", "--resume", "auto", "--stall-timeout", "12.5", "--on-nonfinite", "skip"});
  TempDir dir;
  const std::string text = settings_toml(first, "# written by the test\n");
  const std::string path = write(dir, "config.toml", text);
  const TrainConfig second = resolved({"--config", path});
  BOOST_CHECK_EQUAL(settings_toml(second, "# written by the test\n"), text);
  // And the printed settings, which config.toml's writer does not produce: a key it forgot shows here.
  TrainConfig second_without_file = second;
  second_without_file.config_file.clear();
  BOOST_CHECK_EQUAL(describe(second_without_file), describe(first));
  BOOST_CHECK_EQUAL(second.out_dir, "runs/caf\xc3\xa9\nnext");
  BOOST_CHECK_EQUAL(second.data_dir, "/data/\"quoted\" dir\\with\tescapes");
  BOOST_CHECK_EQUAL(second.trace, "-t.json");
  BOOST_CHECK_EQUAL(second.seed, 18446744073709551615ULL);
  BOOST_CHECK_EQUAL(second.lr, 0.0123456789);
  BOOST_CHECK(second.quiet);
  BOOST_CHECK_EQUAL(second.steps_per_launch, 7);
  BOOST_CHECK(text.find("\nsteps-per-launch = 7\n") != std::string::npos);
  BOOST_CHECK_EQUAL(second.config_file, path);
}

BOOST_AUTO_TEST_CASE(defaults_read_back_too, *boost::unit_test::precondition(ConfigFilesRead{})) {
  const TrainConfig first = resolved({});
  TempDir dir;
  const std::string text = settings_toml(first, "");
  const TrainConfig second = resolved({"--config", write(dir, "config.toml", text)});
  BOOST_CHECK_EQUAL(settings_toml(second, ""), text);
  BOOST_CHECK(!second.quiet);
  BOOST_CHECK(text.find("\nsteps-per-launch = \"auto\"\n") != std::string::npos);
  BOOST_CHECK_EQUAL(second.steps_per_launch, 0);  // auto
}

BOOST_AUTO_TEST_CASE(the_command_line_overrides_the_file, *boost::unit_test::precondition(ConfigFilesRead{})) {
  TempDir dir;
  const std::string path =
      write(dir, "c.toml", "lr = 0.5\nepochs = 3\nquiet = true\nmodel = \"cifar\"\nbackend = \"seq\"\nseed = 9\n");
  const TrainConfig after = parse({"--config", path, "--lr", "0.2", "--seed=4"}).config;
  BOOST_CHECK_EQUAL(after.lr, 0.2);
  BOOST_CHECK_EQUAL(after.seed, 4U);
  BOOST_CHECK_EQUAL(after.epochs, 3);
  BOOST_CHECK(after.quiet);
  BOOST_CHECK_EQUAL(after.model, "cifar");
  const TrainConfig before = parse({"--lr", "0.2", "--backend", "threads", "--config", path}).config;  // wherever it stands
  BOOST_CHECK_EQUAL(before.lr, 0.2);
  BOOST_CHECK(before.backend == BackendKind::kThreads);
  BOOST_CHECK(!parse({"--config", path, "--quiet=false"}).config.quiet);
  BOOST_CHECK(parse({"--config", write(dir, "q.toml", "quiet = false\n"), "--quiet"}).config.quiet);
  BOOST_CHECK(!parse({"--config", write(dir, "q2.toml", "quiet = false\n")}).config.quiet);
  // The last --config counts, as for any option.
  BOOST_CHECK_EQUAL(parse({"--config", path, "--config", write(dir, "e.toml", "epochs = 7\n")}).config.epochs, 7);
}

BOOST_AUTO_TEST_CASE(the_subcommand_comes_from_the_file_unless_the_command_line_names_one,
                     *boost::unit_test::precondition(ConfigFilesRead{})) {
  TempDir dir;
  const std::string eval = write(dir, "eval.toml", "command = \"eval\"\ncheckpoint = \"x.h5\"\n");
  const TrainConfig from_file = parse({"--config", eval}).config;
  BOOST_CHECK(from_file.command == Command::kEval);
  BOOST_CHECK_EQUAL(from_file.checkpoint, "x.h5");
  const std::string train = write(dir, "train.toml", "command = \"train\"\nepochs = 2\n");
  BOOST_CHECK(parse({"eval", "--checkpoint", "y.h5", "--config", train}).config.command == Command::kEval);
  BOOST_CHECK(parse({"--config", train, "eval", "--checkpoint", "y.h5"}).config.command == Command::kEval);
  BOOST_CHECK(parse({"train", "--config", eval, "--checkpoint", ""}).config.command == Command::kTrain);
  // A value that spells a subcommand is a value, not the subcommand.
  BOOST_CHECK_EQUAL(parse({"--config", train, "--model", "eval"}).config.model, "eval");
}

BOOST_AUTO_TEST_CASE(bad_files_stop_with_the_file_line_and_key, *boost::unit_test::precondition(ConfigFilesRead{})) {
  BOOST_CHECK_EQUAL(refusal("epochs = 2\nlrr = 0.1\n"),
                    "FILE:2: unknown key 'lrr' (the keys are the long options without '--')");
  BOOST_CHECK_EQUAL(refusal("# settings\n\ntrain_samples = 10\n"),
                    "FILE:3: unknown key 'train_samples' (did you mean 'train-samples'? keys are the long options, "
                    "with their dashes)");
  BOOST_CHECK_EQUAL(refusal("epochs = \"2\"\n"), "FILE:1: key 'epochs' must be an integer, got a string");
  BOOST_CHECK_EQUAL(refusal("epochs = 2.0\n"), "FILE:1: key 'epochs' must be an integer, got a float");
  BOOST_CHECK_EQUAL(refusal("lr = \"fast\"\n"), "FILE:1: key 'lr' must be a number, got a string");
  BOOST_CHECK_EQUAL(refusal("quiet = 1\n"), "FILE:1: key 'quiet' must be true or false, got an integer");
  BOOST_CHECK_EQUAL(refusal("model = 5\n"), "FILE:1: key 'model' must be a string, got an integer");
  BOOST_CHECK_EQUAL(refusal("steps-per-launch = 1.5\n"),
                    "FILE:1: key 'steps-per-launch' must be \"auto\" or an integer, got a float");
  BOOST_CHECK_EQUAL(refusal("steps-per-launch = 0\n"),
                    "--steps-per-launch must be auto or a whole number of at least 1 (got '0')");
  BOOST_CHECK_EQUAL(refusal("seed = \"12x\"\n"),
                    "FILE:1: key 'seed' must be a non-negative integer (above 2^63-1: a string of digits), got a string");
  BOOST_CHECK_EQUAL(refusal("data = 2026-01-01\n"), "FILE:1: key 'data' must be a string, got a date");
  BOOST_CHECK_EQUAL(refusal("epochs = [1, 2]\n"), "FILE:1: key 'epochs' holds an array; each key takes one value");
  BOOST_CHECK_EQUAL(refusal("lr = 0.1\n[train]\nepochs = 2\n"),
                    "FILE:2: 'train' is a table; a config file holds top-level keys only (lr = 0.05, not [train] or "
                    "train.name = ...)");
  BOOST_CHECK_EQUAL(refusal("optim.lr = 0.1\n"),
                    "FILE:1: 'optim' is a table; a config file holds top-level keys only (lr = 0.05, not [optim] or "
                    "optim.name = ...)");
  BOOST_CHECK_EQUAL(refusal("command = \"fly\"\n"),
                    "FILE:1: key 'command' must be one of the subcommands (train, eval, predict), got 'fly'");
  BOOST_CHECK_EQUAL(refusal("config = \"other.toml\"\n"), "FILE:1: key 'config': a config file cannot read another one");
  BOOST_CHECK_EQUAL(refusal("\"a\\nb\" = 1\n"),
                    "FILE:1: unknown key 'a\\x0ab' (the keys are the long options without '--')");
  // The first bad key in the file is the one reported, whatever toml++'s order.
  BOOST_CHECK_EQUAL(refusal("zzz = 1\naaa = 2\n").substr(0, 27), "FILE:1: unknown key 'zzz' (");
  // Malformed TOML: toml++'s line and column.
  BOOST_CHECK(refusal("epochs = 2\nepochs = 3\n").rfind("FILE:2:", 0) == 0);
  const std::string malformed = refusal("lr = 0.1\nepochs = = 2\n");
  BOOST_CHECK_MESSAGE(malformed.rfind("FILE:2:", 0) == 0 && malformed.find("malformed TOML: ") != std::string::npos,
                      malformed);
  BOOST_CHECK(refusal("seed = 99999999999999999999\n").rfind("FILE:1:", 0) == 0);
  // A bad value of the right type meets the option's own check.
  BOOST_CHECK_EQUAL(refusal("epochs = 0\n"), "--epochs must be at least 1 (got 0)");
  BOOST_CHECK_EQUAL(refusal("seed = -1\n"), "--seed: must not be negative (got -1)");
}

BOOST_AUTO_TEST_CASE(a_file_that_cannot_be_read_is_an_io_error, *boost::unit_test::precondition(ConfigFilesRead{})) {
  TempDir dir;
  BOOST_CHECK_EQUAL(error_of<IoError>([&] { parse({"--config", dir.file("none.toml")}); }),
                    "--config " + dir.file("none.toml") + ": file does not exist");
  BOOST_CHECK_EQUAL(error_of<IoError>([&] { parse({"--config", dir.path}); }),
                    "--config " + dir.path + ": is a directory, expected a file");
  BOOST_CHECK_EQUAL(error_of<UsageError>([&] { parse({"--config"}); }), "--config needs the path of a TOML file");
}

BOOST_AUTO_TEST_CASE(a_build_without_toml_says_so, *boost::unit_test::precondition(ConfigFilesNotRead{})) {
  TempDir dir;
  const std::string path = write(dir, "c.toml", "epochs = 2\n");
  const std::string message = error_of<UsageError>([&] { parse({"--config", path}); });
  BOOST_CHECK_MESSAGE(message.find("this build has no config-file support") != std::string::npos, message);
  BOOST_CHECK(parse({}).config.config_file.empty());  // without --config nothing changes
}
