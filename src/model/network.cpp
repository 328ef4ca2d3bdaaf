// The --model grammar (network.hpp) as a loop over the layer registry (layer_registry.hpp): this
// file knows the spec's structure (tokens, the implicit flatten, the loss head, the flat layout's
// naming rule) and no layer kind; what a kind parses, resolves to and owns is its registry entry.
#include "cnn/network.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <sstream>

#include "cnn/errors.hpp"
#include "cnn/layer_registry.hpp"

namespace cnn {

namespace {

// Beyond these a network would not fit the int32 sample indices and per-sample offsets the ops use.
constexpr std::int64_t kMaxParams = std::int64_t{1} << 30;
constexpr std::int64_t kMaxActivation = std::int64_t{1} << 28;

// One piece of the spec: a layer's token, a block's keyword ("res[") or the "]" that closes it. A
// block's keyword and its "]" are written against the layers inside ("res[conv3x3:8/p1 relu]"), so
// they are split off the whitespace-separated token they came with.
struct Token {
  std::string text;   // the piece
  int column = 0;     // 0-based, in the spec as given
  int index = 0;      // 1-based index of the whitespace-separated token it came from (error messages)
};

std::vector<Token> split(const std::string& spec, std::vector<std::string>& whole) {
  std::vector<Token> pieces;
  std::size_t i = 0;
  while (i < spec.size()) {
    while (i < spec.size() && std::isspace(static_cast<unsigned char>(spec[i]))) ++i;
    const std::size_t start = i;
    while (i < spec.size() && !std::isspace(static_cast<unsigned char>(spec[i]))) ++i;
    if (i == start) continue;
    const std::string text = spec.substr(start, i - start);
    whole.push_back(text);
    const int index = static_cast<int>(whole.size());
    std::size_t begin = 0, end = text.size();
    for (bool opened = true; opened;) {  // "res[res[" too, so that the builder can say why it is refused
      opened = false;
      for (std::size_t k = 0; k < layer_def_count() && !opened; ++k) {
        const LayerDef& def = layer_def(static_cast<LayerKind>(k));
        const std::string keyword(def.keyword);
        if (def.block && text.compare(begin, keyword.size(), keyword) == 0) {
          pieces.push_back({keyword, static_cast<int>(start + begin), index});
          begin += keyword.size();
          opened = true;
        }
      }
    }
    std::size_t closes = 0;
    while (end > begin && text[end - 1] == ']') --end, ++closes;
    if (end > begin) pieces.push_back({text.substr(begin, end - begin), static_cast<int>(start + begin), index});
    for (std::size_t k = 0; k < closes; ++k) pieces.push_back({"]", static_cast<int>(start + end + k), index});
  }
  return pieces;
}

std::string with_commas(std::int64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

// "a conv", "an avgpool": a kind's name in an error.
std::string with_article(const std::string& name) {
  return (name.find_first_of("aeiou") == 0 ? "an " : "a ") + name;
}

// Parses one token's text with the registry entry whose keyword it matches (*def); returns "" or the
// reason it is not a layer.
std::string parse_token(const std::string& text, LayerToken& t, const LayerDef*& def) {
  for (std::size_t i = 0; i < layer_def_count(); ++i) {
    const LayerDef& candidate = layer_def(static_cast<LayerKind>(i));
    const std::string keyword(candidate.keyword);
    const bool matches = candidate.parse == nullptr ? text == keyword : text.compare(0, keyword.size(), keyword) == 0;
    if (!matches) continue;
    def = &candidate;
    return candidate.parse == nullptr ? "" : candidate.parse(text, keyword.size(), t);
  }
  return "unknown layer (" + grammar_text() + ")";
}

class SpecError {
 public:
  SpecError(std::string model, std::string spec) : model_(std::move(model)), spec_(std::move(spec)) {}

  [[noreturn]] void at(int token_index, const std::string& token, const std::string& why) const {
    throw UsageError(quote() + ": token " + std::to_string(token_index) + " '" + token + "': " + why);
  }
  [[noreturn]] void whole(const std::string& why) const { throw UsageError(quote() + ": " + why); }

 private:
  std::string quote() const {
    // A preset is quoted with its expansion, so the pointed token can be found.
    if (model_ != spec_) return "--model " + model_ + " = '" + spec_ + "'";
    return "--model '" + spec_ + "'";
  }
  std::string model_, spec_;
};

// Resolves the pieces into layers, a block's into its body, checking where each kind may stand.
class LayerListBuilder {
 public:
  LayerListBuilder(const SpecError& error, const std::vector<Token>& pieces, const std::vector<std::string>& whole)
      : error_(error), pieces_(pieces), whole_(whole) {}

  // The layers from the next piece on, up to the end of the spec, or of the block opened by `block`
  // (its "]" is taken). shape: their input, then their output; flat: the features have started.
  std::vector<Layer> resolve(TensorShape& shape, bool& flat, const Token* block) {
    std::vector<Layer> layers;
    while (next_ < pieces_.size()) {
      const Token& token = pieces_[next_++];
      if (token.text == "]") {
        if (block == nullptr) fail(token, "']' closes no block (" + grammar_text() + ")");
        return layers;
      }
      LayerToken parsed;
      const LayerDef* def = nullptr;
      const std::string why = parse_token(token.text, parsed, def);
      if (!why.empty()) fail(token, why);

      Layer layer;
      layer.kind = def->kind;
      layer.token = token.index;
      layer.column = token.column;
      layer.in = shape;
      // Where the kind may stand: before or after the features start (the first flatten or fc).
      if (block != nullptr && (def->input == LayerInput::kFlat || def->input == LayerInput::kFlatOnce))
        fail(token, with_article(def->name) + " cannot stand inside a block: its layers keep C x H x W");
      switch (def->input) {
        case LayerInput::kAny:
          break;
        case LayerInput::kSpatial:
          if (flat)
            fail(token, with_article(def->name) + " needs C x H x W input, but it comes after a flatten or fc");
          break;
        case LayerInput::kFlatOnce:
          if (flat) continue;  // already flat: a no-op
          flat = true;
          break;
        case LayerInput::kFlat:
          if (!flat) {
            // The implicit flatten before the first fc.
            Layer flatten;
            flatten.kind = LayerKind::kFlatten;
            flatten.in = shape;
            (void)layer_def(LayerKind::kFlatten).resolve(LayerToken{}, flatten);
            layers.push_back(flatten);
            shape = flatten.out;
            layer.in = shape;
            flat = true;
          }
          break;
      }
      if (def->block) {
        if (block != nullptr) fail(token, "a block cannot hold another block");
        TensorShape inner = shape;
        bool inner_flat = false;
        layer.body = resolve(inner, inner_flat, &token);
      }
      const std::string misfit = def->resolve(parsed, layer);
      if (!misfit.empty()) fail(token, misfit);
      if (layer.out.size() > kMaxActivation)
        fail(token, "its output of " + shape_text(layer.out) + " floats per image is too large");
      shape = layer.out;
      layers.push_back(layer);
    }
    if (block != nullptr) fail(*block, "the block has no closing ']'");
    return layers;
  }

  [[noreturn]] void fail(const Token& token, const std::string& why) const {
    error_.at(token.index, whole_[static_cast<std::size_t>(token.index - 1)], why);
  }

 private:
  const SpecError& error_;
  const std::vector<Token>& pieces_;
  const std::vector<std::string>& whole_;
  std::size_t next_ = 0;
};

// Each kind's layers, counted through blocks (a kind's parameter names are numbered when it has
// several): layers of a block count in forward order, body then shortcut.
void count_kinds(const std::vector<Layer>& layers, std::vector<int>& of_kind) {
  for (const Layer& layer : layers) {
    ++of_kind[static_cast<std::size_t>(layer.kind)];
    count_kinds(layer.body, of_kind);
    count_kinds(layer.shortcut, of_kind);
  }
}

}  // namespace

Network build_network(const std::string& model, int filters, TensorShape input, int classes) {
  const std::string preset = preset_spec(model, filters, classes);
  const std::string spec = preset.empty() ? model : preset;
  const SpecError error(model, spec);
  std::vector<std::string> whole;
  const std::vector<Token> pieces = split(spec, whole);
  if (pieces.empty())
    error.whole("no layers (give a preset, such as seed, cifar or resnet10, or layers such as 'conv3x3:32 relu maxpool2 fc:10')");

  Network net;
  net.input = input;
  net.classes = classes;
  TensorShape shape = input;
  bool flat = false;
  LayerListBuilder builder(error, pieces, whole);
  net.layers = builder.resolve(shape, flat, nullptr);

  const Layer& last = net.layers.back();
  const Token& last_token = pieces.back();
  if (last.kind != LayerKind::kFc)
    builder.fail(last_token, "the last layer must be fc:" + std::to_string(classes) + " (the data has " +
                                 std::to_string(classes) + " classes)");
  if (last.fc_out != classes)
    builder.fail(last_token, "the last layer must have one output per class: fc:" + std::to_string(classes));

  // Parameter names and the flat layout, in layer order, a block's layers where it stands (a
  // checkpoint's names and offsets: keep them).
  std::vector<int> of_kind(layer_def_count(), 0), seen(layer_def_count(), 0);
  count_kinds(net.layers, of_kind);
  std::int64_t params = 0;
  const std::function<void(std::vector<Layer>&)> lay_out = [&](std::vector<Layer>& layers) {
    for (Layer& layer : layers) {
      if (!layer.body.empty()) {
        const std::int64_t begin = net.layout.total();
        lay_out(layer.body);
        lay_out(layer.shortcut);
        layer.param_count = net.layout.total() - begin;
        if (layer.param_count > 0) layer.weight_offset = begin;
        continue;
      }
      const LayerDef& def = layer_def(layer.kind);
      if (def.param_prefix == nullptr) continue;
      const auto k = static_cast<std::size_t>(layer.kind);
      ++seen[k];
      layer.name = !def.number_alone && of_kind[k] == 1 ? std::string(def.param_prefix)
                                                         : def.param_prefix + std::to_string(seen[k]);
      const LayerParams p = def.params(layer);
      std::int64_t weights = 1;
      for (const std::int64_t extent : p.weight_shape) weights *= extent;
      params += weights + p.biases;
      if (params > kMaxParams) error.at(layer.token, whole[static_cast<std::size_t>(layer.token - 1)], "too many parameters");
      if (p.unit_scale) {
        layer.weight_offset = net.layout.add_constant(layer.name, "weight", p.weight_shape, 1.0f);
        layer.bias_offset = net.layout.add_constant(layer.name, "bias", {p.biases}, 0.0f);
      } else {
        layer.weight_offset = net.layout.add(layer.name, "weight", p.weight_shape, p.fan_in);
        layer.bias_offset = net.layout.add(layer.name, "bias", {p.biases}, p.fan_in);
      }
      layer.param_count = weights + p.biases;
      if (p.state > 0) {
        layer.state_offset = net.state_count;
        net.state_count += p.state;
      }
    }
  };
  lay_out(net.layers);

  std::string canonical;
  for (const Layer& layer : net.layers) {
    const std::string text = layer_def(layer.kind).canonical(layer);
    if (text.empty()) continue;
    if (!canonical.empty()) canonical += ' ';
    canonical += text;
  }
  net.spec = canonical;
  return net;
}

std::optional<SeedModel> Network::as_seed() const {
  std::vector<const Layer*> real;
  for (const Layer& layer : layers)
    if (layer.kind != LayerKind::kFlatten) real.push_back(&layer);
  if (real.size() != 4) return std::nullopt;
  const Layer& conv = *real[0];
  const Layer& pool = *real[2];
  if (conv.kind != LayerKind::kConv || real[1]->kind != LayerKind::kRelu || pool.kind != LayerKind::kMaxPool ||
      real[3]->kind != LayerKind::kFc)
    return std::nullopt;
  if (conv.conv.stride != 1 || conv.conv.pad != 0 || pool.pool.size != 2 || pool.pool.stride != 2)
    return std::nullopt;
  SeedModel seed;
  seed.input = input;
  seed.kernel = conv.conv.kernel;
  seed.filters = conv.conv.filters;
  seed.classes = classes;
  return seed;
}

double Network::flops_per_image() const {
  // The fused seed path does less work (its conv weight gradient only at pool winners); count that.
  if (const std::optional<SeedModel> seed = as_seed()) return seed->flops_per_image();
  double macs = 0.0;
  bool params_before = false;
  const std::function<void(const std::vector<Layer>&)> add = [&](const std::vector<Layer>& list) {
    for (const Layer& layer : list) {
      if (!layer.body.empty()) {
        // The body and the shortcut both start from the block's input.
        const bool before = params_before;
        add(layer.body);
        params_before = before;
        add(layer.shortcut);
        params_before = before || layer.has_params();
        continue;
      }
      const LayerDef& def = layer_def(layer.kind);
      const bool has_params = def.param_prefix != nullptr;
      if (def.forward_macs != nullptr) {
        // forward + weight gradient (with parameters) + input gradient (none below the first parameters).
        const double passes = 1.0 + (has_params ? 1.0 : 0.0) + (params_before ? 1.0 : 0.0);
        macs += def.forward_macs(layer) * passes;
      }
      params_before |= has_params;
    }
  };
  add(layers);
  return 2.0 * macs;
}

std::vector<float> Network::initial_state() const {
  std::vector<float> state(static_cast<std::size_t>(state_count), 0.0f);
  const std::function<void(const std::vector<Layer>&)> visit = [&](const std::vector<Layer>& list) {
    for (const Layer& layer : list) {
      if (layer.kind == LayerKind::kBatchNorm) {
        const auto variance = static_cast<std::size_t>(layer.state_offset + layer.in.channels);
        std::fill(state.begin() + static_cast<std::ptrdiff_t>(variance),
                  state.begin() + static_cast<std::ptrdiff_t>(variance + static_cast<std::size_t>(layer.in.channels)), 1.0f);
      }
      visit(layer.body);
      visit(layer.shortcut);
    }
  };
  visit(layers);
  return state;
}

std::int64_t Network::largest_activation() const {
  std::int64_t largest = input.size();
  const std::function<void(const std::vector<Layer>&)> visit = [&](const std::vector<Layer>& list) {
    for (const Layer& layer : list) {
      largest = std::max({largest, layer.in.size(), layer.out.size()});
      visit(layer.body);
      visit(layer.shortcut);
    }
  };
  visit(layers);
  return largest;
}

std::string Network::describe() const {
  std::ostringstream text;
  text << spec << " (input " << shape_text(input) << ", " << with_commas(layout.total()) << " parameters)";
  return text.str();
}

Network block_network(const Network& network, const Layer& block, const std::vector<Layer>& layers) {
  Network net;
  net.input = block.in;
  net.classes = network.classes;
  net.layers = layers;
  net.state_count = network.state_count;  // the layers' state offsets point into the network's buffer
  return net;
}

Network seed_network(const SeedModel& model) {
  const std::string spec = "conv" + std::to_string(model.kernel) + "x" + std::to_string(model.kernel) + ":" +
                           std::to_string(model.filters) + " relu maxpool2 fc:" + std::to_string(model.classes);
  return build_network(spec, model.filters, model.input, model.classes);
}

}  // namespace cnn
