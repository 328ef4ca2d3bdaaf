// A general network, as described by --model SPEC, resolved against the data's input shape.
//
// The grammar (README, "Models"; --help): whitespace-separated tokens
//   conv<K>x<K>:<F>[/s<S>][/p<P>]   convolution, K x K kernel, F filters, stride S (1), zero padding P (0)
//   relu                            max(0, x)
//   maxpool<K>[/s<S>]               max-pool over K x K windows, stride S (default K)
//   avgpool                         global average pool: C x H x W -> C x 1 x 1
//   avgpool<K>[/s<S>]               average pool over K x K windows, stride S (default K)
//   dropout:<P>                     inverted dropout, drop probability P in [0, 1); off in evaluation
//   flatten                         C x H x W -> C*H*W features (implicit before the first fc)
//   fc:<N>                          fully connected, N outputs
//   bn                              batch normalisation per channel (per feature after fc): statistics of
//                                   the training batch, running statistics in evaluation
//   res[<layers>]                   a residual block: out = layers(x) + shortcut(x), where the shortcut is
//                                   the identity, or a 1x1 conv (stride to match) when the layers change
//                                   the shape; the layers are conv, relu, bn, maxpool, avgpool and dropout
// The last layer must be fc:<classes>; softmax cross-entropy follows it. Presets (presets.hpp):
//   seed     = conv3x3:D relu maxpool2 fc:<classes>   (D = --filters; the default)
//   cifar    = conv3x3:32 relu maxpool2 conv3x3:64 relu maxpool2 conv3x3:64 relu fc:64 relu fc:10
//   resnet10 = a small ResNet with bn, with a training recipe of its own
// Parameter tensors are named conv1..convN and fc (one fc layer) or fc1..fcM (several), each with
// .weight and .bias, in layer order in the flat buffer (ParamLayout).
// Each layer kind's token, shape rule, canonical text, parameters and FLOPs are its entry in the layer
// registry (layer_registry.hpp); build_network is a loop over the tokens that looks kinds up there.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cnn/layer_ops.hpp"
#include "cnn/model.hpp"
#include "cnn/presets.hpp"  // preset_spec: a preset's layers

namespace cnn {

// What each kind means (token, shape, canonical text, parameters, FLOPs) is its entry in the layer
// registry (layers.def, layer_registry.hpp), in this order.
enum class LayerKind {
#define CNN_LAYER(name, Kind) Kind,
#define CNN_VIEW_LAYER(name, Kind) Kind,
#include "cnn/layers.def"
#undef CNN_LAYER
#undef CNN_VIEW_LAYER
};

// "conv", "relu", "maxpool", "flatten", "fc", "residual" (the registry's names).
const char* layer_kind_name(LayerKind kind);

// One resolved layer. Shapes are per sample; after a flatten or fc they are {features, 1, 1}.
struct Layer {
  LayerKind kind = LayerKind::kRelu;
  TensorShape in;
  TensorShape out;
  ConvShape conv;                     // kConv only
  PoolShape pool;                     // kMaxPool only
  AvgPoolShape avg_pool;              // kAvgPool only
  double dropout = 0.0;               // kDropout only: the drop probability P, 0 <= P < 1
  int fc_out = 0;                     // kFc only (its in-features are in.size())
  std::string name;                   // parameter layer name ("conv2", "fc", "fc1"); empty without parameters
  std::int64_t weight_offset = -1;    // into the flat parameter buffer; -1 without parameters
  std::int64_t bias_offset = -1;
  std::int64_t param_count = 0;       // weights and biases, [weight_offset, weight_offset + param_count)
  // kBatchNorm: its running mean then running variance (in.channels each) in the network's state
  // buffer (Network::state_count); -1 for other kinds.
  std::int64_t state_offset = -1;
  int token = 0;                      // 1-based index of the spec token it came from; 0 for an implicit flatten
  int column = -1;                    // 0-based column of that token in the spec as given; -1 if implicit
  // A composite layer (kResidual): its layers, from `in` to `out`, and its shortcut, empty for the
  // identity. Their parameters follow each other in the flat buffer (body, then shortcut), and the
  // block's own weight_offset and param_count span them all (bias_offset stays -1).
  std::vector<Layer> body;
  std::vector<Layer> shortcut;

  bool has_params() const { return param_count > 0; }  // its own, or its body's and shortcut's
};

struct Network {
  TensorShape input;
  int classes = 0;
  std::vector<Layer> layers;          // in order; always ends with fc:<classes>
  ParamLayout layout;
  // Running statistics of the bn layers (mean, then variance, per layer in layer order): not trained,
  // not allreduced, saved in the checkpoint's /state/bn_running; 0 without bn layers.
  std::int64_t state_count = 0;
  std::string spec;                   // canonical: preset expanded, default strides/pads and flatten left out

  // "conv3x3:32 relu maxpool2 fc:10 (input 1x28x28, 54,410 parameters)"
  std::string describe() const;
  // Multiply-adds x2 of one image's forward and backward pass.
  double flops_per_image() const;
  // The seed model when the network is exactly conv KxK:F (stride 1, pad 0), relu, maxpool2 (stride
  // 2), fc:classes: backends then run their fused fast path. Empty otherwise.
  std::optional<SeedModel> as_seed() const;
  // Floats per sample of the largest layer input or output, inside blocks too (sizes activation buffers).
  std::int64_t largest_activation() const;
  // Whether any layer, inside blocks too, is a bn layer (the CPU step then runs one micro-batch per thread).
  bool has_batch_norm() const { return state_count > 0; }
  // The state buffer's starting values: running means 0, running variances 1.
  std::vector<float> initial_state() const;
};

// Parses and resolves --model (a preset name or a spec) for `input` images in `classes` classes.
// A bad spec throws UsageError with ONE line quoting the spec and naming the bad token, e.g.
//   --model 'conv3x3:32 conv3x3:0 fc:10': token 2 'conv3x3:0': the filter count must be at least 1
Network build_network(const std::string& model, int filters, TensorShape input, int classes);

// The layers of a composite layer (block.body or block.shortcut) as a network of their own, for the
// block's op to run them with the ops of the top level: input block.in, network's classes, the
// layers' parameter offsets into the same flat buffer (and no layout of its own).
Network block_network(const Network& network, const Layer& block, const std::vector<Layer>& layers);

// The network of the seed model (what SeedModel describes), for tests and the fused path's owners.
Network seed_network(const SeedModel& model);

}  // namespace cnn
