// The --model presets: each one's layers and, for a preset meant to be trained as it is, its training
// recipe: defaults for the options that decide how well it trains (optimizer, lr and its schedule,
// weight decay, label smoothing, augmentation, batch, epochs). A recipe value applies only where the
// user gave no value: the command line and a --config file both override it (src/app/preset_recipe.cpp
// applies it, in one place, before the settings are checked). docs/TRAINING.md, "Presets and their
// recipes"; README, "Models".
#pragma once

#include <string>
#include <vector>

namespace cnn {

// One default of a recipe: a long option (its name without "--", the key a config file uses) and its
// value as the command line spells it. `only_with`, when set, names another option of the recipe: this
// default applies only when that option ends up at the recipe's value (so the preset's --nesterov
// does not follow a user's --optimizer adam into a refusal).
struct RecipeDefault {
  std::string option;
  std::string value;
  std::string only_with;
};

struct Preset {
  std::string name;                   // what --model takes
  // Its layer spec, with {D} for --filters and {classes} for the data's classes where it has them.
  std::string layers;
  std::string summary;                // what it is for, a phrase for --help
  std::vector<RecipeDefault> recipe;  // empty: the options' own defaults (seed, cifar)
};

// Every preset, in --help's order.
const std::vector<Preset>& presets();

// The preset called `name`, or nullptr when `name` is not one (a layer spec).
const Preset* find_preset(const std::string& name);

// The layer spec of a preset name, or "" when `name` is not a preset. filters is the seed's D.
std::string preset_spec(const std::string& name, int filters, int classes);

// "seed = conv3x3:D relu maxpool2 fc:<classes> (...); cifar = ...": the presets for --help.
std::string presets_help();

}  // namespace cnn
