#include "cnn/presets.hpp"

namespace cnn {
namespace {

// A small ResNet for 28x28 images, ten weighted layers: a 3x3 conv to 32 channels, then three stages
// at 28x28, 14x14 and 7x7 of 32, 64 and 128 channels, each a conv (which widens) and one residual
// block of two convs (ResNet's basic block: conv bn relu conv bn, identity shortcut, relu after the
// sum), a 2x2 max-pool between stages, a global average pool and the classifier. About 0.48 M
// parameters and 51 M multiply-adds per 28x28 image, evenly over the stages: channel counts that keep
// a GPU's conv products busy without making them slow. Any image size works (the pool is global).
constexpr const char* kResnet10Layers =
    "conv3x3:32/p1 bn relu res[conv3x3:32/p1 bn relu conv3x3:32/p1 bn] relu maxpool2 "
    "conv3x3:64/p1 bn relu res[conv3x3:64/p1 bn relu conv3x3:64/p1 bn] relu maxpool2 "
    "conv3x3:128/p1 bn relu res[conv3x3:128/p1 bn relu conv3x3:128/p1 bn] relu avgpool fc:{classes}";

// Its recipe: the fast small-network training of the DAWNBench/airbench line, for MNIST and
// Fashion-MNIST alike: SGD with Nesterov momentum under a one-cycle schedule (warm-up over the first
// 30% of the updates, built in), L2 decay 5e-4, label smoothing 0.1, random crops of 2 pixels (no
// flip: a mirrored digit is another digit), a global batch of 512. Targets (issue 26): a mean final
// test accuracy over seeds 1-3 of >= 93.0% on Fashion-MNIST and >= 99.4% on MNIST within 20 epochs.
const std::vector<RecipeDefault> kResnet10Recipe = {
    {"batch", "512", ""},
    {"epochs", "16", ""},
    {"optimizer", "momentum", ""},
    {"momentum", "0.9", ""},
    {"nesterov", "true", "optimizer"},
    {"lr", "0.2", ""},
    {"lr-schedule", "onecycle", ""},
    {"weight-decay", "5e-4", ""},
    {"label-smoothing", "0.1", ""},
    {"augment", "crop:2", ""},
};

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"seed", "conv3x3:{D} relu maxpool2 fc:{classes}", "the default; D = --filters", {}},
      {"cifar", "conv3x3:32 relu maxpool2 conv3x3:64 relu maxpool2 conv3x3:64 relu fc:64 relu fc:10",
       "the second study's model", {}},
      {"resnet10", kResnet10Layers,
       "a small ResNet with bn (10 weighted layers) that trains to >= 93% on Fashion-MNIST and >= 99.4% on "
       "MNIST with its own recipe",
       kResnet10Recipe},
  };
  return all;
}

const Preset* find_preset(const std::string& name) {
  for (const Preset& preset : presets())
    if (preset.name == name) return &preset;
  return nullptr;
}

std::string preset_spec(const std::string& name, int filters, int classes) {
  const Preset* preset = find_preset(name);
  if (preset == nullptr) return "";
  return replace_all(replace_all(preset->layers, "{D}", std::to_string(filters)), "{classes}", std::to_string(classes));
}

std::string presets_help() {
  std::string text;
  for (const Preset& preset : presets()) {
    if (!text.empty()) text += "; ";
    text += preset.name + " = " + replace_all(replace_all(preset.layers, "{D}", "D"), "{classes}", "<classes>") +
            " (" + preset.summary;
    if (!preset.recipe.empty()) {
      text += "; its defaults, which options given override:";
      for (const RecipeDefault& entry : preset.recipe)
        text += " --" + entry.option + (entry.value == "true" ? "" : " " + entry.value);
    }
    text += ")";
  }
  return text;
}

}  // namespace cnn
