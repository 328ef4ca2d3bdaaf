// The layer registry (layer_registry.hpp): the table of the kinds' entries (each in its
// src/layers/<name>.cpp, listed by layers.def) and the parse helpers they share. Every error text
// here and in the entries is part of the CLI (tests/test_network.cpp, tests/bad_input/60_model.cases,
// the spec fuzzer): change none by accident.
#include "cnn/layer_registry.hpp"

#include <cctype>
#include <climits>
#include <stdexcept>

namespace cnn {

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

std::string read_pool_window(const std::string& text, std::size_t pos, LayerToken& t, const char* no_size,
                             const char* size_hint) {
  if (!read_int(text, pos, t.kernel)) return no_size;
  t.stride = t.kernel;
  const std::string why = read_suffixes(text, pos, false, t);
  if (!why.empty()) return why;
  if (t.kernel < 1) return std::string("the window size must be at least 1") + size_hint;
  if (t.stride < 1) return "the stride must be at least 1";
  return "";
}

std::string pool_window_fit(int size, const TensorShape& in) {
  if (size <= in.height && size <= in.width) return "";
  return "a " + std::to_string(size) + "x" + std::to_string(size) + " window does not fit its " + shape_text(in) +
         " input";
}

namespace {

// The registry, in LayerKind order (layers.def; the grammar text lists it in this order). The
// entries are constant-initialised in their own files, so their addresses are usable here at start-up.
const LayerDef* const kLayers[] = {
#define CNN_LAYER(name, Kind) &name##_layer,
#define CNN_VIEW_LAYER(name, Kind) &name##_layer,
#include "cnn/layers.def"
#undef CNN_LAYER
#undef CNN_VIEW_LAYER
};
constexpr std::size_t kLayerCount = sizeof(kLayers) / sizeof(kLayers[0]);

}  // namespace

const LayerDef& layer_def(LayerKind kind) {
  const auto index = static_cast<std::size_t>(kind);
  if (index >= kLayerCount || kLayers[index]->kind != kind)
    throw std::logic_error("layer_def: the registry is not in LayerKind order");
  return *kLayers[index];
}

std::size_t layer_def_count() { return kLayerCount; }

const std::string& grammar_text() {
  // "expected A, B, C or D", from the entries so that a new kind shows up in the message by itself.
  static const std::string text = [] {
    std::string joined = "expected ";
    for (std::size_t i = 0; i < kLayerCount; ++i) {
      if (i > 0) joined += i + 1 == kLayerCount ? " or " : ", ";
      joined += kLayers[i]->syntax;
    }
    return joined;
  }();
  return text;
}

std::string shape_text(const TensorShape& s) {
  return std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" + std::to_string(s.width);
}

const char* layer_kind_name(LayerKind kind) { return layer_def(kind).name; }


}  // namespace cnn
