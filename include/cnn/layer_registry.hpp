// The layer registry: one entry per LayerKind with everything the --model grammar and the network
// builder (network.cpp) know about that kind, so the builder itself holds no per-kind code:
//   the token's keyword and the parse of what follows it, the output shape from the input shape (with
//   the kind's own shape checks), the canonical text, the parameter tensors and their fan-in (the flat
//   layout, hence the checkpoint's parameter names and offsets), and the forward multiply-adds that
//   Network::flops_per_image counts.
// Adding a layer kind: its line in layers.def, and its two files there named: src/layers/<name>.cpp
// defines its LayerDef (below) and its CPU op, kernels/layers/<name>.cu its CUDA op. The op plan
// (op_plan.hpp) runs a layer as its own op unless a fused pattern takes it in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cnn/network.hpp"

namespace cnn {

// One token as parsed, before shapes are known (what the kinds' parse functions fill in).
struct LayerToken {
  int kernel = 0, filters = 0, stride = 1, pad = 0, fc_out = 0;
  double rate = 0.0;  // dropout:<P>
};

// Where a kind may stand relative to the first flatten or fc (after which inputs are features).
enum class LayerInput {
  kAny,             // relu, dropout: either
  kSpatial,         // conv, maxpool: C x H x W only; after a flatten or fc the spec is refused
  kFlat,            // fc: features; the builder adds the implicit flatten before the first one
  kFlatOnce,        // flatten: makes features; once flat, a further flatten token is a no-op and dropped
};

// A layer's parameter tensors: <name>.weight of weight_shape and <name>.bias of `biases`, both
// initialised with the bound of fan_in, or (unit_scale: a bn layer's gamma and beta) weights 1 and
// biases 0. state: floats of running statistics (not parameters: Network::state_count).
struct LayerParams {
  std::vector<std::int64_t> weight_shape;
  std::int64_t biases = 0;
  std::int64_t fan_in = 0;
  bool unit_scale = false;
  std::int64_t state = 0;
};

struct LayerDef {
  LayerKind kind;
  // A composite layer: its keyword ("res[") opens a block that a token ending in ']' closes; the
  // builder resolves the layers between into Layer::body before calling resolve, which checks them
  // and makes the shortcut. The block holds layers with LayerInput kSpatial or kAny only.
  bool block;
  const char* name;      // layer_kind_name: "conv"
  const char* syntax;    // in the grammar's error text: "maxpool<K>[/s<S>]"
  // The token: `keyword` exactly (parse == nullptr), or `keyword` followed by what parse reads from
  // text[pos...]; parse returns "" or why the token is not a layer (quoted in the UsageError). The
  // keywords must not match each other's tokens: the builder takes the first that matches.
  const char* keyword;
  std::string (*parse)(const std::string& text, std::size_t pos, LayerToken& t);
  LayerInput input;
  // Fills layer's kind fields (conv, pool, fc_out) and layer.out from t and layer.in; "" or why
  // the layer does not fit its input.
  std::string (*resolve)(const LayerToken& t, Layer& layer);
  // Its token in the canonical spec (defaults left out); "" for none (flatten).
  std::string (*canonical)(const Layer& layer);
  // Parameters: the tensors are named <param_prefix><N>, N counting the kind's layers from 1, or
  // <param_prefix> alone when it is the only one of its kind and !number_alone ("fc" but "conv1").
  // param_prefix == nullptr: no parameters (params unused).
  const char* param_prefix;
  bool number_alone;
  LayerParams (*params)(const Layer& layer);
  // Multiply-adds of one image's forward pass; nullptr where not counted (relu, maxpool, flatten).
  double (*forward_macs)(const Layer& layer);
};

// The entry of `kind`.
const LayerDef& layer_def(LayerKind kind);

// How many kinds there are: LayerKind values 0 .. layer_def_count() - 1.
std::size_t layer_def_count();

// "expected conv<K>x<K>:<F>[/s<S>][/p<P>], relu, ... or fc:<N>": the syntaxes, for parse errors.
const std::string& grammar_text();

// "1x28x28": how errors and Network::describe show a per-sample shape.
std::string shape_text(const TensorShape& shape);

// For the kinds' parse functions: a decimal integer at text[pos...]; false (and pos unchanged) when
// there is none or it overflows.
bool read_int(const std::string& text, std::size_t& pos, int& value);
// "/s<S>" and "/p<P>" suffixes at text[pos...] (each at most once, /p only with allow_pad); "" or why not.
std::string read_suffixes(const std::string& text, std::size_t pos, bool allow_pad, LayerToken& t);
// The window of a pool token (maxpool, avgpool) at text[pos...]: <K>[/s<S>], the stride K unless /s
// gives one; "" or why not. no_size: the reason when no K is there; size_hint: added to the reason
// for a K below 1.
std::string read_pool_window(const std::string& text, std::size_t pos, LayerToken& t, const char* no_size,
                             const char* size_hint);
// "" when a size x size window fits the per-sample input, else why not.
std::string pool_window_fit(int size, const TensorShape& in);
// Beyond this a kernel, filter count or fc width would not fit the int32 indices the ops use.
inline constexpr int kMaxLayerExtent = 1 << 16;

// The entries, one per line of layers.def, each defined in its src/layers/<name>.cpp.
#define CNN_LAYER(name, Kind) extern const LayerDef name##_layer;
#define CNN_VIEW_LAYER(name, Kind) extern const LayerDef name##_layer;
#include "cnn/layers.def"
#undef CNN_LAYER
#undef CNN_VIEW_LAYER

}  // namespace cnn
