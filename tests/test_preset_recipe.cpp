// A --model preset's training recipe (include/cnn/presets.hpp, src/app/preset_recipe.cpp): its defaults
// apply to the options left unset, and the precedence is the option's built-in default < the preset's
// recipe < a --config file < the command line. Presets without a recipe change nothing. The tests that
// read TOML skip, saying so, in a build without toml++.
#define BOOST_TEST_MODULE preset_recipe
#include "boost_test.hpp"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "cnn/cli.hpp"
#include "cnn/config_file.hpp"
#include "cnn/errors.hpp"
#include "cnn/network.hpp"
#include "cnn/presets.hpp"
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

TrainConfig parse(std::vector<std::string> words) {
  words.insert(words.begin(), "cnn_mpi");
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  return parse_command_line(static_cast<int>(argv.size()), argv.data()).config;
}

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

bool holds(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// The recipe's settings of a config, as one comparable text.
std::string recipe_settings(const TrainConfig& c) {
  return "batch " + std::to_string(c.batch) + ", epochs " + std::to_string(c.epochs) + ", optimizer " +
         optimizer_name(c.optimizer) + ", momentum " + std::to_string(c.momentum) + ", nesterov " +
         (c.nesterov ? "on" : "off") + ", lr " + std::to_string(c.lr) + ", schedule " + lr_schedule_text(c.lr_schedule) +
         ", warmup " + std::to_string(c.warmup_steps) + ", decay " + std::to_string(c.weight_decay) + ", smoothing " +
         std::to_string(c.label_smoothing) + ", augment " + augment_text(c.augment);
}

}  // namespace

BOOST_AUTO_TEST_CASE(resnet10_takes_its_recipe_when_nothing_is_given) {
  const TrainConfig c = parse({"--model", "resnet10"});
  BOOST_CHECK_EQUAL(c.batch, 512);
  BOOST_CHECK_EQUAL(c.epochs, 16);
  BOOST_CHECK(c.optimizer == OptimizerKind::kMomentum);
  BOOST_CHECK_EQUAL(c.momentum, 0.9);
  BOOST_CHECK(c.nesterov);
  BOOST_CHECK_EQUAL(c.lr, 0.2);
  BOOST_CHECK_EQUAL(lr_schedule_text(c.lr_schedule), "onecycle");
  BOOST_CHECK_EQUAL(c.warmup_steps, 0);
  BOOST_CHECK_EQUAL(c.weight_decay, 5e-4);
  BOOST_CHECK_EQUAL(c.label_smoothing, 0.1);
  BOOST_CHECK_EQUAL(augment_text(c.augment), "crop:2");
  BOOST_CHECK_EQUAL(c.preset_defaults.preset, "resnet10");
  BOOST_CHECK_EQUAL(c.preset_defaults.applied.size(), find_preset("resnet10")->recipe.size());
  BOOST_CHECK(c.preset_defaults.given.empty());
  BOOST_CHECK(c.preset_defaults.skipped.empty());
  // What the recipe does not name keeps the option's own default.
  BOOST_CHECK_EQUAL(c.seed, 1U);
  BOOST_CHECK(!c.bn_local);
  // The settings block says which values came from the preset.
  const std::string block = describe(c);
  BOOST_CHECK_MESSAGE(block.find("  preset_defaults: resnet10: --batch 512, --epochs 16, --optimizer momentum, "
                                 "--momentum 0.9, --nesterov, --lr 0.2, --lr-schedule onecycle, --weight-decay 5e-4, "
                                 "--label-smoothing 0.1, --augment crop:2\n") != std::string::npos,
                      block);
}

BOOST_AUTO_TEST_CASE(the_command_line_overrides_the_recipe) {
  const TrainConfig c = parse({"--model", "resnet10", "--lr", "0.05", "--epochs", "3", "--augment", "none"});
  BOOST_CHECK_EQUAL(c.lr, 0.05);
  BOOST_CHECK_EQUAL(c.epochs, 3);
  BOOST_CHECK_EQUAL(augment_text(c.augment), "none");
  BOOST_CHECK_EQUAL(c.batch, 512);  // the rest still from the recipe
  BOOST_CHECK(c.nesterov);
  BOOST_CHECK(holds(c.preset_defaults.given, "--lr"));
  BOOST_CHECK(holds(c.preset_defaults.given, "--epochs"));
  BOOST_CHECK(holds(c.preset_defaults.given, "--augment"));
  BOOST_CHECK(!holds(c.preset_defaults.applied, "--lr 0.2"));
  BOOST_CHECK(holds(c.preset_defaults.applied, "--batch 512"));
  // A value equal to the option's built-in default is still given: the user's word wins.
  BOOST_CHECK_EQUAL(parse({"--model", "resnet10", "--batch", "100"}).batch, 100);
  BOOST_CHECK(!parse({"--model", "resnet10", "--nesterov=false"}).nesterov);
  // The option may come before --model: the recipe follows the final model, not the order.
  BOOST_CHECK_EQUAL(parse({"--lr", "0.3", "--model", "resnet10"}).lr, 0.3);
  // A repeated --model takes its last value, as any option: the recipe follows it.
  BOOST_CHECK_EQUAL(parse({"--model", "resnet10", "--model", "cifar"}).batch, 100);
  BOOST_CHECK_EQUAL(parse({"--model", "cifar", "--model", "resnet10"}).batch, 512);
}

BOOST_AUTO_TEST_CASE(the_config_file_overrides_the_recipe_and_the_command_line_the_file,
                     *boost::unit_test::precondition(ConfigFilesRead{})) {
  TempDir dir;
  const std::string path = write(dir, "r.toml", "model = \"resnet10\"\nlr = 0.05\nbatch = 256\nnesterov = false\n");
  const TrainConfig file = parse({"--config", path});
  BOOST_CHECK_EQUAL(file.lr, 0.05);         // file > recipe
  BOOST_CHECK_EQUAL(file.batch, 256);
  BOOST_CHECK(!file.nesterov);
  BOOST_CHECK_EQUAL(file.epochs, 16);       // recipe > built-in default (1)
  BOOST_CHECK(file.optimizer == OptimizerKind::kMomentum);
  BOOST_CHECK(holds(file.preset_defaults.given, "--lr"));
  BOOST_CHECK(holds(file.preset_defaults.given, "--batch"));
  BOOST_CHECK(holds(file.preset_defaults.given, "--nesterov"));
  const TrainConfig both = parse({"--config", path, "--lr", "0.3", "--epochs", "2"});
  BOOST_CHECK_EQUAL(both.lr, 0.3);          // command line > file
  BOOST_CHECK_EQUAL(both.epochs, 2);        // command line > recipe
  BOOST_CHECK_EQUAL(both.batch, 256);       // file > recipe
  // The preset named on the command line takes its recipe under a file that names another model.
  const std::string cifar = write(dir, "c.toml", "model = \"cifar\"\nepochs = 5\n");
  const TrainConfig named = parse({"--config", cifar, "--model", "resnet10"});
  BOOST_CHECK_EQUAL(named.batch, 512);
  BOOST_CHECK_EQUAL(named.epochs, 5);
}

// RUN_DIR/config.toml holds the resolved values: read back, it gives the same settings (all of them
// given now, so the recipe has nothing left to set), and a comment says which came from the recipe.
BOOST_AUTO_TEST_CASE(config_toml_holds_the_resolved_recipe, *boost::unit_test::precondition(ConfigFilesRead{})) {
  TrainConfig first = parse({"--model", "resnet10", "--lr", "0.1"});
  resolve_config(first, 1, 1, -1);
  const std::string text = settings_toml(first, "");
  BOOST_CHECK_MESSAGE(text.find("# from the resnet10 preset's recipe (the options not given): --batch 512 --epochs 16 ") !=
                          std::string::npos,
                      text);
  BOOST_CHECK(text.find("--lr 0.2") == std::string::npos);
  TempDir dir;
  TrainConfig second = parse({"--config", write(dir, "config.toml", text)});
  resolve_config(second, 1, 1, -1);
  BOOST_CHECK_EQUAL(recipe_settings(second), recipe_settings(first));
  BOOST_CHECK(second.preset_defaults.applied.empty());
  BOOST_CHECK_EQUAL(second.preset_defaults.given.size(), find_preset("resnet10")->recipe.size());
}

BOOST_AUTO_TEST_CASE(nesterov_follows_the_recipes_optimizer_only) {
  const TrainConfig adam = parse({"--model", "resnet10", "--optimizer", "adam", "--lr", "0.001"});
  BOOST_CHECK(adam.optimizer == OptimizerKind::kAdam);
  BOOST_CHECK(!adam.nesterov);  // not applied, so no refusal of --nesterov with adam
  BOOST_CHECK_EQUAL(adam.preset_defaults.skipped.size(), 1U);
  BOOST_CHECK_EQUAL(adam.preset_defaults.skipped.at(0), "--nesterov (needs --optimizer momentum)");
  BOOST_CHECK_MESSAGE(describe(adam).find("; not applied: --nesterov (needs --optimizer momentum)") != std::string::npos,
                      describe(adam));
  BOOST_CHECK(parse({"--model", "resnet10", "--optimizer", "momentum"}).nesterov);  // given, but the recipe's own
  BOOST_CHECK(parse({"--model", "resnet10", "--optimizer=momentum", "--momentum", "0.95"}).nesterov);
}

BOOST_AUTO_TEST_CASE(a_refusal_of_a_preset_default_names_the_preset) {
  BOOST_CHECK_EQUAL(error_of<UsageError>([] { parse({"--model", "resnet10", "--warmup-steps", "10"}); }),
                    "--warmup-steps with --lr-schedule onecycle: onecycle warms up by itself (its first 30% of the "
                    "steps) (--lr-schedule onecycle is the resnet10 preset's default; give --lr-schedule to choose "
                    "another)");
  BOOST_CHECK_EQUAL(error_of<UsageError>([] { parse({"--model", "resnet10", "--momentum", "0"}); }),
                    "--nesterov needs a --momentum above 0 (got 0) (--nesterov is the resnet10 preset's default; give "
                    "--nesterov=false to turn it off)");
  // The user's own values are refused as before, with no hint.
  BOOST_CHECK_EQUAL(error_of<UsageError>([] { parse({"--model", "resnet10", "--optimizer", "sgd", "--nesterov"}); }),
                    "--nesterov needs --optimizer momentum (got sgd)");
  BOOST_CHECK_EQUAL(error_of<UsageError>([] { parse({"--model", "resnet10", "--keep", "0"}); }),
                    "--keep must be at least 1 (got 0)");
  // With another schedule the warm-up is the user's to give.
  BOOST_CHECK_EQUAL(parse({"--model", "resnet10", "--lr-schedule", "cosine", "--warmup-steps", "10"}).warmup_steps, 10);
}

// Presets without a recipe, a layer spec, and eval and predict: exactly the options' own defaults.
BOOST_AUTO_TEST_CASE(everything_else_keeps_the_options_defaults) {
  const std::string plain = recipe_settings(parse({}));
  for (const char* model : {"seed", "cifar", "conv3x3:8 relu maxpool2 fc:10"}) {
    const TrainConfig c = parse({"--model", model});
    BOOST_CHECK_EQUAL(recipe_settings(c), plain);
    BOOST_CHECK(c.preset_defaults.preset.empty());
    BOOST_CHECK(describe(c).find("preset_defaults") == std::string::npos);
  }
  const TrainConfig eval = parse({"eval", "--checkpoint", "x.h5", "--model", "resnet10"});
  BOOST_CHECK_EQUAL(recipe_settings(eval), plain);
  BOOST_CHECK(eval.preset_defaults.preset.empty());
  const TrainConfig predict = parse({"predict", "--checkpoint", "x.h5", "--out", "p.csv", "--model", "resnet10"});
  BOOST_CHECK_EQUAL(recipe_settings(predict), plain);
}

// Every recipe names real options with values their parsers and checks accept, on its own.
BOOST_AUTO_TEST_CASE(every_recipe_parses) {
  for (const Preset& preset : presets()) {
    if (preset.recipe.empty()) continue;
    const TrainConfig c = parse({"--model", preset.name});
    BOOST_CHECK_EQUAL(c.preset_defaults.applied.size(), preset.recipe.size());
    for (const RecipeDefault& entry : preset.recipe)
      if (!entry.only_with.empty())
        BOOST_CHECK_MESSAGE(std::any_of(preset.recipe.begin(), preset.recipe.end(),
                                        [&](const RecipeDefault& e) { return e.option == entry.only_with; }),
                            preset.name << ": --" << entry.option << " depends on --" << entry.only_with
                                        << ", which the recipe does not set");
  }
}

BOOST_AUTO_TEST_CASE(resnet10_builds_for_mnist_and_cifar_shapes) {
  const Network mnist = build_network("resnet10", 32, TensorShape{1, 28, 28}, 10);
  BOOST_CHECK_EQUAL(mnist.layout.total(), 482826);
  BOOST_CHECK(mnist.has_batch_norm());
  int convs = 0, blocks = 0;
  for (const Layer& layer : mnist.layers) {
    convs += layer.kind == LayerKind::kConv;
    blocks += !layer.body.empty();
    for (const Layer& inner : layer.body) convs += inner.kind == LayerKind::kConv;
    BOOST_CHECK(layer.shortcut.empty());  // each block keeps its shape: identity shortcuts
  }
  BOOST_CHECK_EQUAL(convs, 9);  // nine convs and the fc: ten weighted layers
  BOOST_CHECK_EQUAL(blocks, 3);
  BOOST_CHECK(mnist.layers.back().kind == LayerKind::kFc && mnist.layers.back().fc_out == 10);
  // The global pool makes it fit other image sizes and class counts.
  const Network cifar = build_network("resnet10", 32, TensorShape{3, 32, 32}, 100);
  BOOST_CHECK_EQUAL(cifar.layers.back().fc_out, 100);
  BOOST_CHECK_EQUAL(preset_spec("resnet10", 7, 5).find("{"), std::string::npos);
  BOOST_CHECK_EQUAL(preset_spec("seed", 7, 5), "conv3x3:7 relu maxpool2 fc:5");
  BOOST_CHECK_EQUAL(preset_spec("cifar", 7, 5),
                    "conv3x3:32 relu maxpool2 conv3x3:64 relu maxpool2 conv3x3:64 relu fc:64 relu fc:10");
  BOOST_CHECK_EQUAL(preset_spec("conv3x3:8 relu fc:10", 7, 5), "");
}
