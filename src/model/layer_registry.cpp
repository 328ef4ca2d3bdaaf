// The layer registry (layer_registry.hpp): per layer kind, its token, shape, canonical text,
// parameters and FLOPs. Every error text here is part of the CLI (tests/test_network.cpp,
// tests/bad_input/60_model.cases, the spec fuzzer): change none by accident.
#include "cnn/layer_registry.hpp"

#include <cctype>
#include <climits>
#include <stdexcept>

namespace cnn {

namespace {

// Beyond this a kernel, filter count or fc width would not fit the int32 indices the ops use.
constexpr int kMaxExtent = 1 << 16;

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

// Parses "/s<S>" and "/p<P>" suffixes (each at most once, `allow_pad` for conv). Returns "" or why not.
std::string read_suffixes(const std::string& text, std::size_t pos, bool allow_pad, LayerToken& t) {
  bool seen_stride = false, seen_pad = false;
  while (pos < text.size()) {
    if (text[pos] != '/' || pos + 1 >= text.size()) return grammar_text();
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
      return std::string("unexpected '/") + what + "' (" + grammar_text() + ")";
    }
  }
  return "";
}

// ---- conv<K>x<K>:<F>[/s<S>][/p<P>]

std::string parse_conv(const std::string& text, std::size_t pos, LayerToken& t) {
  int k2 = 0;
  if (!read_int(text, pos, t.kernel) || pos >= text.size() || text[pos] != 'x') return grammar_text();
  ++pos;
  if (!read_int(text, pos, k2) || pos >= text.size() || text[pos] != ':') return grammar_text();
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

std::string resolve_conv(const LayerToken& t, Layer& layer) {
  ConvShape& c = layer.conv;
  c.channels = layer.in.channels;
  c.height = layer.in.height;
  c.width = layer.in.width;
  c.filters = t.filters;
  c.kernel = t.kernel;
  c.stride = t.stride;
  c.pad = t.pad;
  if (c.kernel > c.height + 2 * c.pad || c.kernel > c.width + 2 * c.pad || c.kernel > kMaxExtent ||
      c.filters > kMaxExtent)
    return "a " + std::to_string(c.kernel) + "x" + std::to_string(c.kernel) + " kernel does not fit its " +
           shape_text(layer.in) + " input (padding " + std::to_string(c.pad) + ")";
  layer.out = {c.filters, c.out_h(), c.out_w()};
  return "";
}

std::string canonical_conv(const Layer& layer) {
  const ConvShape& c = layer.conv;
  std::string text =
      "conv" + std::to_string(c.kernel) + "x" + std::to_string(c.kernel) + ":" + std::to_string(c.filters);
  if (c.stride != 1) text += "/s" + std::to_string(c.stride);
  if (c.pad != 0) text += "/p" + std::to_string(c.pad);
  return text;
}

LayerParams params_conv(const Layer& layer) {
  const ConvShape& c = layer.conv;
  const std::int64_t fan_in = static_cast<std::int64_t>(c.channels) * c.kernel * c.kernel;
  return {{c.filters, c.channels, c.kernel, c.kernel}, c.filters, fan_in};
}

double macs_conv(const Layer& layer) {
  return static_cast<double>(layer.conv.out_size()) * layer.conv.channels * layer.conv.kernel * layer.conv.kernel;
}

// ---- relu

std::string resolve_relu(const LayerToken&, Layer& layer) {
  layer.out = layer.in;
  return "";
}

std::string canonical_relu(const Layer&) { return "relu"; }

// ---- maxpool<K>[/s<S>]

std::string parse_maxpool(const std::string& text, std::size_t pos, LayerToken& t) {
  if (!read_int(text, pos, t.kernel)) return "maxpool needs a window size (maxpool<K>)";
  t.stride = t.kernel;
  const std::string why = read_suffixes(text, pos, false, t);
  if (!why.empty()) return why;
  if (t.kernel < 1) return "the window size must be at least 1";
  if (t.stride < 1) return "the stride must be at least 1";
  return "";
}

std::string resolve_maxpool(const LayerToken& t, Layer& layer) {
  PoolShape& p = layer.pool;
  p.channels = layer.in.channels;
  p.height = layer.in.height;
  p.width = layer.in.width;
  p.size = t.kernel;
  p.stride = t.stride;
  if (p.size > p.height || p.size > p.width)
    return "a " + std::to_string(p.size) + "x" + std::to_string(p.size) + " window does not fit its " +
           shape_text(layer.in) + " input";
  layer.out = {p.channels, p.out_h(), p.out_w()};
  return "";
}

std::string canonical_maxpool(const Layer& layer) {
  std::string text = "maxpool" + std::to_string(layer.pool.size);
  if (layer.pool.stride != layer.pool.size) text += "/s" + std::to_string(layer.pool.stride);
  return text;
}

// ---- flatten (free in NCHW: left out of the canonical spec)

std::string resolve_flatten(const LayerToken&, Layer& layer) {
  layer.out = {static_cast<int>(layer.in.size()), 1, 1};
  return "";
}

std::string canonical_flatten(const Layer&) { return ""; }

// ---- fc:<N>

std::string parse_fc(const std::string& text, std::size_t pos, LayerToken& t) {
  if (!read_int(text, pos, t.fc_out) || pos != text.size()) return "fc:<N> needs a whole number N";
  if (t.fc_out < 1) return "fc needs at least 1 output";
  return "";
}

std::string resolve_fc(const LayerToken& t, Layer& layer) {
  layer.fc_out = t.fc_out;
  if (t.fc_out > kMaxExtent * 16) return "too many outputs";
  layer.out = {t.fc_out, 1, 1};
  return "";
}

std::string canonical_fc(const Layer& layer) { return "fc:" + std::to_string(layer.fc_out); }

LayerParams params_fc(const Layer& layer) {
  const std::int64_t in_features = layer.in.size();
  return {{layer.fc_out, in_features}, layer.fc_out, in_features};
}

double macs_fc(const Layer& layer) { return static_cast<double>(layer.in.size()) * layer.fc_out; }

// The registry, in LayerKind order (layer_def indexes it; the grammar text lists it in this order).
const LayerDef kLayers[] = {
    {LayerKind::kConv, "conv", "conv<K>x<K>:<F>[/s<S>][/p<P>]", "conv", parse_conv, LayerInput::kSpatial,
     resolve_conv, canonical_conv, "conv", true, params_conv, macs_conv},
    {LayerKind::kRelu, "relu", "relu", "relu", nullptr, LayerInput::kAny, resolve_relu, canonical_relu, nullptr, false,
     nullptr, nullptr},
    {LayerKind::kMaxPool, "maxpool", "maxpool<K>[/s<S>]", "maxpool", parse_maxpool, LayerInput::kSpatial,
     resolve_maxpool, canonical_maxpool, nullptr, false, nullptr, nullptr},
    {LayerKind::kFlatten, "flatten", "flatten", "flatten", nullptr, LayerInput::kFlatOnce, resolve_flatten,
     canonical_flatten, nullptr, false, nullptr, nullptr},
    {LayerKind::kFc, "fc", "fc:<N>", "fc:", parse_fc, LayerInput::kFlat, resolve_fc, canonical_fc, "fc", false,
     params_fc, macs_fc},
};
constexpr std::size_t kLayerCount = sizeof(kLayers) / sizeof(kLayers[0]);

}  // namespace

const LayerDef& layer_def(LayerKind kind) {
  const auto index = static_cast<std::size_t>(kind);
  if (index >= kLayerCount || kLayers[index].kind != kind)
    throw std::logic_error("layer_def: the registry is not in LayerKind order");
  return kLayers[index];
}

const LayerDef* layer_defs() { return kLayers; }
std::size_t layer_def_count() { return kLayerCount; }

const std::string& grammar_text() {
  // "expected A, B, C or D", from the entries so that a new kind shows up in the message by itself.
  static const std::string text = [] {
    std::string joined = "expected ";
    for (std::size_t i = 0; i < kLayerCount; ++i) {
      if (i > 0) joined += i + 1 == kLayerCount ? " or " : ", ";
      joined += kLayers[i].syntax;
    }
    return joined;
  }();
  return text;
}

std::string shape_text(const TensorShape& s) {
  return std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" + std::to_string(s.width);
}

const char* layer_kind_name(LayerKind kind) { return layer_def(kind).name; }

bool Layer::has_params() const { return layer_def(kind).param_prefix != nullptr; }

}  // namespace cnn
