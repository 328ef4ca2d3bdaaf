#include "cnn/network.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <sstream>

#include "cnn/errors.hpp"

namespace cnn {

namespace {

// Beyond these a network would not fit the int32 sample indices and per-sample offsets the ops use.
constexpr std::int64_t kMaxParams = std::int64_t{1} << 30;
constexpr std::int64_t kMaxActivation = std::int64_t{1} << 28;
constexpr int kMaxExtent = 1 << 16;

const char* const kGrammar =
    "expected conv<K>x<K>:<F>[/s<S>][/p<P>], relu, maxpool<K>[/s<S>], flatten or fc:<N>";

struct Token {
  std::string text;
  int column = 0;
};

std::vector<Token> split(const std::string& spec) {
  std::vector<Token> tokens;
  std::size_t i = 0;
  while (i < spec.size()) {
    while (i < spec.size() && std::isspace(static_cast<unsigned char>(spec[i]))) ++i;
    const std::size_t start = i;
    while (i < spec.size() && !std::isspace(static_cast<unsigned char>(spec[i]))) ++i;
    if (i > start) tokens.push_back({spec.substr(start, i - start), static_cast<int>(start)});
  }
  return tokens;
}

std::string shape_text(const TensorShape& s) {
  return std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" + std::to_string(s.width);
}

std::string with_commas(std::int64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

// Reads a decimal integer at text[pos...]; false (and pos unchanged) when there is none or it overflows.
bool read_int(const std::string& text, std::size_t& pos, int& value) {
  std::size_t i = pos;
  long long v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    v = v * 10 + (text[i] - '0');
    if (v > INT_MAX) return false;
    ++i;
  }
  if (i == pos) return false;
  value = static_cast<int>(v);
  pos = i;
  return true;
}

bool starts_with(const std::string& text, const char* prefix, std::size_t& pos) {
  const std::string p(prefix);
  if (text.compare(0, p.size(), p) != 0) return false;
  pos = p.size();
  return true;
}

// The parser's view of one token before shapes are known.
struct ParsedToken {
  LayerKind kind = LayerKind::kRelu;
  int kernel = 0, filters = 0, stride = 1, pad = 0, fc_out = 0;
};

// Parses "/s<S>" and "/p<P>" suffixes (each at most once, `allow_pad` for conv). Returns "" or why not.
std::string read_suffixes(const std::string& text, std::size_t pos, bool allow_pad, ParsedToken& t) {
  bool seen_stride = false, seen_pad = false;
  while (pos < text.size()) {
    if (text[pos] != '/' || pos + 1 >= text.size()) return kGrammar;
    const char what = text[pos + 1];
    pos += 2;
    int value = 0;
    if (what == 's' && !seen_stride) {
      if (!read_int(text, pos, value)) return "the stride after /s must be a number";
      t.stride = value;
      seen_stride = true;
    } else if (what == 'p' && allow_pad && !seen_pad) {
      if (!read_int(text, pos, value)) return "the padding after /p must be a number";
      t.pad = value;
      seen_pad = true;
    } else {
      return std::string("unexpected '/") + what + "' (" + kGrammar + ")";
    }
  }
  return "";
}

// Parses one token's text; returns "" or the reason it is not a layer.
std::string parse_token(const std::string& text, ParsedToken& t) {
  std::size_t pos = 0;
  if (text == "relu") {
    t.kind = LayerKind::kRelu;
    return "";
  }
  if (text == "flatten") {
    t.kind = LayerKind::kFlatten;
    return "";
  }
  if (starts_with(text, "fc:", pos)) {
    t.kind = LayerKind::kFc;
    if (!read_int(text, pos, t.fc_out) || pos != text.size()) return "fc:<N> needs a whole number N";
    if (t.fc_out < 1) return "fc needs at least 1 output";
    return "";
  }
  if (starts_with(text, "conv", pos)) {
    t.kind = LayerKind::kConv;
    int k2 = 0;
    if (!read_int(text, pos, t.kernel) || pos >= text.size() || text[pos] != 'x') return kGrammar;
    ++pos;
    if (!read_int(text, pos, k2) || pos >= text.size() || text[pos] != ':') return kGrammar;
    ++pos;
    if (!read_int(text, pos, t.filters)) return "conv needs a filter count after ':'";
    const std::string why = read_suffixes(text, pos, true, t);
    if (!why.empty()) return why;
    if (t.kernel != k2) return "only square kernels are supported (conv<K>x<K>)";
    if (t.kernel < 1) return "the kernel size must be at least 1";
    if (t.filters < 1) return "the filter count must be at least 1";
    if (t.stride < 1) return "the stride must be at least 1";
    if (t.pad >= t.kernel) return "the padding must be smaller than the kernel";
    return "";
  }
  if (starts_with(text, "maxpool", pos)) {
    t.kind = LayerKind::kMaxPool;
    if (!read_int(text, pos, t.kernel)) return "maxpool needs a window size (maxpool<K>)";
    t.stride = t.kernel;
    const std::string why = read_suffixes(text, pos, false, t);
    if (!why.empty()) return why;
    if (t.kernel < 1) return "the window size must be at least 1";
    if (t.stride < 1) return "the stride must be at least 1";
    return "";
  }
  return std::string("unknown layer (") + kGrammar + ")";
}

std::string canonical_token(const Layer& layer) {
  switch (layer.kind) {
    case LayerKind::kConv: {
      const ConvShape& c = layer.conv;
      std::string text = "conv" + std::to_string(c.kernel) + "x" + std::to_string(c.kernel) + ":" +
                         std::to_string(c.filters);
      if (c.stride != 1) text += "/s" + std::to_string(c.stride);
      if (c.pad != 0) text += "/p" + std::to_string(c.pad);
      return text;
    }
    case LayerKind::kRelu: return "relu";
    case LayerKind::kMaxPool: {
      std::string text = "maxpool" + std::to_string(layer.pool.size);
      if (layer.pool.stride != layer.pool.size) text += "/s" + std::to_string(layer.pool.stride);
      return text;
    }
    case LayerKind::kFlatten: return "";
    case LayerKind::kFc: return "fc:" + std::to_string(layer.fc_out);
  }
  return "";
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

}  // namespace

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kConv: return "conv";
    case LayerKind::kRelu: return "relu";
    case LayerKind::kMaxPool: return "maxpool";
    case LayerKind::kFlatten: return "flatten";
    case LayerKind::kFc: return "fc";
  }
  return "?";
}

std::string preset_spec(const std::string& name, int filters, int classes) {
  if (name == "seed")
    return "conv3x3:" + std::to_string(filters) + " relu maxpool2 fc:" + std::to_string(classes);
  if (name == "cifar") return "conv3x3:32 relu maxpool2 conv3x3:64 relu maxpool2 conv3x3:64 relu fc:64 relu fc:10";
  return "";
}

Network build_network(const std::string& model, int filters, TensorShape input, int classes) {
  const std::string preset = preset_spec(model, filters, classes);
  const std::string spec = preset.empty() ? model : preset;
  const SpecError error(model, spec);
  const std::vector<Token> tokens = split(spec);
  if (tokens.empty())
    error.whole("no layers (give a preset, seed or cifar, or layers such as 'conv3x3:32 relu maxpool2 fc:10')");

  Network net;
  net.input = input;
  net.classes = classes;
  TensorShape shape = input;
  bool flat = false;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const Token& token = tokens[i];
    const int index = static_cast<int>(i) + 1;
    ParsedToken parsed;
    const std::string why = parse_token(token.text, parsed);
    if (!why.empty()) error.at(index, token.text, why);

    Layer layer;
    layer.kind = parsed.kind;
    layer.token = index;
    layer.column = token.column;
    layer.in = shape;
    switch (parsed.kind) {
      case LayerKind::kConv: {
        if (flat) error.at(index, token.text, "a conv needs C x H x W input, but it comes after a flatten or fc");
        ConvShape& c = layer.conv;
        c.channels = shape.channels;
        c.height = shape.height;
        c.width = shape.width;
        c.filters = parsed.filters;
        c.kernel = parsed.kernel;
        c.stride = parsed.stride;
        c.pad = parsed.pad;
        if (c.kernel > c.height + 2 * c.pad || c.kernel > c.width + 2 * c.pad || c.kernel > kMaxExtent ||
            c.filters > kMaxExtent)
          error.at(index, token.text,
                   "a " + std::to_string(c.kernel) + "x" + std::to_string(c.kernel) + " kernel does not fit its " +
                       shape_text(shape) + " input (padding " + std::to_string(c.pad) + ")");
        layer.out = {c.filters, c.out_h(), c.out_w()};
        break;
      }
      case LayerKind::kRelu:
        layer.out = shape;
        break;
      case LayerKind::kMaxPool: {
        if (flat) error.at(index, token.text, "a maxpool needs C x H x W input, but it comes after a flatten or fc");
        PoolShape& p = layer.pool;
        p.channels = shape.channels;
        p.height = shape.height;
        p.width = shape.width;
        p.size = parsed.kernel;
        p.stride = parsed.stride;
        if (p.size > p.height || p.size > p.width)
          error.at(index, token.text,
                   "a " + std::to_string(p.size) + "x" + std::to_string(p.size) + " window does not fit its " +
                       shape_text(shape) + " input");
        layer.out = {p.channels, p.out_h(), p.out_w()};
        break;
      }
      case LayerKind::kFlatten:
        if (flat) continue;  // already flat: a no-op
        layer.out = {static_cast<int>(shape.size()), 1, 1};
        flat = true;
        break;
      case LayerKind::kFc: {
        if (!flat) {
          // The implicit flatten before the first fc.
          Layer flatten;
          flatten.kind = LayerKind::kFlatten;
          flatten.in = shape;
          flatten.out = {static_cast<int>(shape.size()), 1, 1};
          net.layers.push_back(flatten);
          shape = flatten.out;
          layer.in = shape;
          flat = true;
        }
        layer.fc_out = parsed.fc_out;
        if (parsed.fc_out > kMaxExtent * 16) error.at(index, token.text, "too many outputs");
        layer.out = {parsed.fc_out, 1, 1};
        break;
      }
    }
    if (layer.out.size() > kMaxActivation)
      error.at(index, token.text, "its output of " + shape_text(layer.out) + " floats per image is too large");
    shape = layer.out;
    net.layers.push_back(layer);
  }

  const Layer& last = net.layers.back();
  const Token& last_token = tokens.back();
  if (last.kind != LayerKind::kFc)
    error.at(static_cast<int>(tokens.size()), last_token.text,
             "the last layer must be fc:" + std::to_string(classes) + " (the data has " + std::to_string(classes) +
                 " classes)");
  if (last.fc_out != classes)
    error.at(static_cast<int>(tokens.size()), last_token.text,
             "the last layer must have one output per class: fc:" + std::to_string(classes));

  // Parameter names and the flat layout, in layer order.
  int conv_count = 0, fc_count = 0;
  for (const Layer& layer : net.layers) {
    conv_count += layer.kind == LayerKind::kConv;
    fc_count += layer.kind == LayerKind::kFc;
  }
  int conv_seen = 0, fc_seen = 0;
  std::int64_t params = 0;
  for (Layer& layer : net.layers) {
    if (layer.kind == LayerKind::kConv) {
      const ConvShape& c = layer.conv;
      layer.name = "conv" + std::to_string(++conv_seen);
      const std::int64_t fan_in = static_cast<std::int64_t>(c.channels) * c.kernel * c.kernel;
      params += c.weight_size() + c.filters;
      if (params > kMaxParams) error.at(layer.token, tokens[layer.token - 1].text, "too many parameters");
      layer.weight_offset = net.layout.add(layer.name, "weight", {c.filters, c.channels, c.kernel, c.kernel}, fan_in);
      layer.bias_offset = net.layout.add(layer.name, "bias", {c.filters}, fan_in);
    } else if (layer.kind == LayerKind::kFc) {
      ++fc_seen;
      layer.name = fc_count == 1 ? std::string("fc") : "fc" + std::to_string(fc_seen);
      const std::int64_t in_features = layer.in.size();
      params += in_features * layer.fc_out + layer.fc_out;
      if (params > kMaxParams) error.at(layer.token, tokens[layer.token - 1].text, "too many parameters");
      layer.weight_offset = net.layout.add(layer.name, "weight", {layer.fc_out, in_features}, in_features);
      layer.bias_offset = net.layout.add(layer.name, "bias", {layer.fc_out}, in_features);
    }
  }
  (void)conv_count;

  std::string canonical;
  for (const Layer& layer : net.layers) {
    const std::string text = canonical_token(layer);
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
  bool first_param_layer = true;
  for (const Layer& layer : layers) {
    double forward = 0.0;
    if (layer.kind == LayerKind::kConv)
      forward = static_cast<double>(layer.conv.out_size()) * layer.conv.channels * layer.conv.kernel * layer.conv.kernel;
    else if (layer.kind == LayerKind::kFc)
      forward = static_cast<double>(layer.in.size()) * layer.fc_out;
    else
      continue;
    // forward + weight gradient + input gradient (none for the first parameter layer).
    macs += forward * (first_param_layer ? 2.0 : 3.0);
    first_param_layer = false;
  }
  return 2.0 * macs;
}

std::int64_t Network::largest_activation() const {
  std::int64_t largest = input.size();
  for (const Layer& layer : layers) largest = std::max({largest, layer.in.size(), layer.out.size()});
  return largest;
}

std::string Network::describe() const {
  std::ostringstream text;
  text << spec << " (input " << shape_text(input) << ", " << with_commas(layout.total()) << " parameters)";
  return text.str();
}

Network seed_network(const SeedModel& model) {
  const std::string spec = "conv" + std::to_string(model.kernel) + "x" + std::to_string(model.kernel) + ":" +
                           std::to_string(model.filters) + " relu maxpool2 fc:" + std::to_string(model.classes);
  return build_network(spec, model.filters, model.input, model.classes);
}

}  // namespace cnn
