// --model SPEC: presets, shapes, canonical specs, parameter names and the seed's fused-path test;
// bad specs each give a UsageError (exit 2) whose one line quotes the spec and names the bad token.
#define BOOST_TEST_MODULE network
#include <string>

#include "boost_test.hpp"
#include "cnn/errors.hpp"
#include "cnn/layer_registry.hpp"
#include "cnn/network.hpp"

using cnn::build_network;
using cnn::Network;

namespace {

const cnn::TensorShape kFashion{1, 28, 28};

std::string names(const Network& net) {
  std::string text;
  for (const cnn::ParamView& view : net.layout.views()) text += (text.empty() ? "" : " ") + view.name();
  return text;
}

// The message of the UsageError that `model` raises (empty when it is accepted).
std::string error_of(const std::string& model, cnn::TensorShape input = kFashion) {
  try {
    build_network(model, 32, input, 10);
  } catch (const cnn::UsageError& e) {
    BOOST_TEST(static_cast<int>(e.code()) == 2);
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(seed_preset_keeps_the_seed_names_and_initial_layout) {
  const Network net = build_network("seed", 32, kFashion, 10);
  BOOST_TEST(net.spec == "conv3x3:32 relu maxpool2 fc:10");
  BOOST_TEST(names(net) == "conv1.weight conv1.bias fc.weight fc.bias");
  const std::optional<cnn::SeedModel> seed = net.as_seed();
  BOOST_REQUIRE(seed.has_value());
  BOOST_TEST(seed->filters == 32);
  // Same views, shapes and offsets as SeedModel::layout(), so seed checkpoints and inits are unchanged.
  const cnn::ParamLayout old = seed->layout();
  BOOST_REQUIRE(old.views().size() == net.layout.views().size());
  for (std::size_t i = 0; i < old.views().size(); ++i) {
    BOOST_TEST(old.views()[i].name() == net.layout.views()[i].name());
    BOOST_TEST(old.views()[i].offset == net.layout.views()[i].offset);
    BOOST_TEST(old.views()[i].fan_in == net.layout.views()[i].fan_in);
    BOOST_TEST((old.views()[i].shape == net.layout.views()[i].shape));
  }
}

BOOST_AUTO_TEST_CASE(cifar_preset_on_fashion_and_cifar_shapes) {
  const Network net = build_network("cifar", 32, kFashion, 10);
  BOOST_TEST(net.spec == "conv3x3:32 relu maxpool2 conv3x3:64 relu maxpool2 conv3x3:64 relu fc:64 relu fc:10");
  BOOST_TEST(names(net) ==
             "conv1.weight conv1.bias conv2.weight conv2.bias conv3.weight conv3.bias fc1.weight fc1.bias fc2.weight "
             "fc2.bias");
  BOOST_TEST(!net.as_seed().has_value());
  // 28 -> 26 -> 13 -> 11 -> 5 -> 3: 64*3*3 features into fc1.
  BOOST_TEST(net.layout.find("fc1.weight").shape[1] == 576);
  const Network cifar = build_network("cifar", 32, {3, 32, 32}, 10);  // 32 -> 30 -> 15 -> 13 -> 6 -> 4
  BOOST_TEST(cifar.layout.find("fc1.weight").shape[1] == 1024);
  BOOST_TEST(cifar.layout.total() == 896 + 18496 + 36928 + 65600 + 650);  // the Keras model's 122,570
}

BOOST_AUTO_TEST_CASE(spec_options_and_canonical_form) {
  const Network net = build_network("  conv5x5:8/p2/s2   relu maxpool3/s2 flatten relu fc:10 ", 0, {3, 32, 32}, 10);
  BOOST_TEST(net.spec == "conv5x5:8/s2/p2 relu maxpool3/s2 relu fc:10");
  const cnn::Layer& conv = net.layers[0];
  BOOST_TEST(conv.out.channels == 8);
  BOOST_TEST(conv.out.height == 16);  // (32 + 4 - 5) / 2 + 1
  BOOST_TEST(net.layers[2].out.height == 7);  // (16 - 3) / 2 + 1
  BOOST_TEST(names(net) == "conv1.weight conv1.bias fc.weight fc.bias");
  BOOST_TEST(std::string(cnn::layer_kind_name(net.layers[3].kind)) == "flatten");
  // A stride or pad that is not the default keeps the seed off the fused path.
  BOOST_TEST(!build_network("conv3x3:8/p1 relu maxpool2 fc:10", 0, kFashion, 10).as_seed().has_value());
  BOOST_TEST(!build_network("conv3x3:8 relu maxpool2/s1 fc:10", 0, kFashion, 10).as_seed().has_value());
  BOOST_TEST(build_network("conv3x3:8 relu maxpool2/s2 flatten fc:10", 0, kFashion, 10).as_seed().has_value());
  // Only fc layers: flatten is implicit.
  BOOST_TEST(build_network("fc:10", 0, kFashion, 10).layout.total() == 7850);
}

// avgpool (global: C x 1 x 1, whatever the plane), avgpool<K>[/s<S>] (maxpool's sizes) and
// dropout:<P> (the shape kept; P printed back shortest), and where they may stand.
BOOST_AUTO_TEST_CASE(pooling_and_dropout_tokens) {
  const Network net = build_network("conv3x3:8 avgpool3/s2 dropout:0.50 avgpool2/s2 relu avgpool dropout:.125 fc:10", 0,
                                    {3, 32, 30}, 10);
  BOOST_TEST(net.spec == "conv3x3:8 avgpool3/s2 dropout:0.5 avgpool2 relu avgpool dropout:0.125 fc:10");
  BOOST_TEST(cnn::shape_text(net.layers[1].out) == "8x14x13");  // (30 - 3) / 2 + 1, (28 - 3) / 2 + 1
  BOOST_TEST(cnn::shape_text(net.layers[2].out) == "8x14x13");
  BOOST_TEST(cnn::shape_text(net.layers[3].out) == "8x7x6");
  BOOST_TEST(cnn::shape_text(net.layers[5].out) == "8x1x1");
  BOOST_TEST(net.layers[5].avg_pool.global);
  BOOST_TEST(net.layers[5].avg_pool.window_h == 7);
  BOOST_TEST(net.layers[5].avg_pool.window_w == 6);
  BOOST_TEST(net.layers[2].dropout == 0.5);
  BOOST_TEST(std::string(cnn::layer_kind_name(net.layers[1].kind)) == "avgpool");
  BOOST_TEST(std::string(cnn::layer_kind_name(net.layers[2].kind)) == "dropout");
  BOOST_TEST(net.layout.find("fc.weight").shape[1] == 8);  // the global pool's 8 features
  BOOST_TEST(names(net) == "conv1.weight conv1.bias fc.weight fc.bias");
  // The canonical spec builds the same network; a global pool of a 7x7 map is not avgpool7.
  BOOST_TEST(build_network(net.spec, 0, {3, 32, 30}, 10).spec == net.spec);
  BOOST_TEST(build_network("avgpool28 fc:10", 0, kFashion, 10).spec == "avgpool28 fc:10");
  BOOST_TEST(build_network("avgpool fc:10", 0, kFashion, 10).spec == "avgpool fc:10");
  BOOST_TEST(build_network("dropout:0.1 fc:10", 0, kFashion, 10).spec == "dropout:0.1 fc:10");
  BOOST_TEST(build_network("dropout:0.3333333333333333 fc:10", 0, kFashion, 10).spec == "dropout:0.3333333333333333 fc:10");
  // Dropout stands anywhere: after the features start, and inside a block.
  BOOST_TEST(build_network("fc:32 relu dropout:0.5 fc:10", 0, kFashion, 10).spec == "fc:32 relu dropout:0.5 fc:10");
  BOOST_TEST(build_network("conv3x3:4/p1 res[conv3x3:4/p1 dropout:0.2 relu avgpool2] fc:10", 0, kFashion, 10).spec ==
             "conv3x3:4/p1 res[conv3x3:4/p1 dropout:0.2 relu avgpool2] fc:10");
}

BOOST_AUTO_TEST_CASE(bad_specs_name_the_token) {
  struct Case {
    std::string spec, expected;
  };
  const Case cases[] = {
      {"conv3x3:32 relu conv3x3:0 fc:10", "token 3 'conv3x3:0': the filter count must be at least 1"},
      {"conv3x3:32 rleu fc:10", "token 2 'rleu': unknown layer"},
      {"conv3x4:8 fc:10", "token 1 'conv3x4:8': only square kernels"},
      {"conv3x3:8/s0 fc:10", "token 1 'conv3x3:8/s0': the stride must be at least 1"},
      {"conv3x3:8/p3 fc:10", "token 1 'conv3x3:8/p3': the padding must be smaller than the kernel"},
      {"conv3x3:8/q1 fc:10", "token 1 'conv3x3:8/q1': unexpected '/q'"},
      {"conv29x29:8 fc:10", "token 1 'conv29x29:8': a 29x29 kernel does not fit its 1x28x28 input"},
      {"maxpool0 fc:10", "token 1 'maxpool0': the window size must be at least 1"},
      {"maxpool2/p1 fc:10", "token 1 'maxpool2/p1': unexpected '/p'"},
      {"fc:64 conv3x3:8 fc:10", "token 2 'conv3x3:8': a conv needs C x H x W input"},
      {"flatten maxpool2 fc:10", "token 2 'maxpool2': a maxpool needs C x H x W input"},
      {"conv3x3:8 relu", "token 2 'relu': the last layer must be fc:10"},
      {"conv3x3:8 fc:9", "token 2 'fc:9': the last layer must have one output per class: fc:10"},
      {"conv3x3:8 fc:x", "token 2 'fc:x': fc:<N> needs a whole number N"},
      {"fc:0 fc:10", "token 1 'fc:0': fc needs at least 1 output"},
      {"conv3x3:99999999999 fc:10", "token 1 'conv3x3:99999999999'"},
      {"avgpool0 fc:10", "token 1 'avgpool0': the window size must be at least 1"},
      {"avgpool2/s0 fc:10", "token 1 'avgpool2/s0': the stride must be at least 1"},
      {"avgpoolx fc:10", "token 1 'avgpoolx': avgpool takes a window size or nothing"},
      {"avgpool2/p1 fc:10", "token 1 'avgpool2/p1': unexpected '/p'"},
      {"avgpool29 fc:10", "token 1 'avgpool29': a 29x29 window does not fit its 1x28x28 input"},
      {"fc:8 avgpool fc:10", "token 2 'avgpool': an avgpool needs C x H x W input"},
      {"dropout:1 fc:10", "token 1 'dropout:1': the drop probability must be below 1"},
      {"dropout:1.5 fc:10", "token 1 'dropout:1.5': the drop probability must be below 1"},
      {"dropout:x fc:10", "token 1 'dropout:x': the drop probability must be a number in [0, 1)"},
      {"dropout:-0.1 fc:10", "token 1 'dropout:-0.1': the drop probability must be a number"},
      {"dropout:0.5x fc:10", "token 1 'dropout:0.5x': the drop probability must be a number"},
      {"dropout:1e-1 fc:10", "token 1 'dropout:1e-1': the drop probability must be a number"},
      {"dropout:. fc:10", "token 1 'dropout:.': the drop probability must be a number"},
      {"dropout: fc:10", "token 1 'dropout:': the drop probability must be a number"},
      {"dropout fc:10", "token 1 'dropout': dropout needs its drop probability"},
      {"dropout0.5 fc:10", "token 1 'dropout0.5': dropout needs its drop probability"},
      {"", "no layers"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of(c.spec);
    BOOST_TEST(message.find("--model '" + c.spec + "'") == 0, "quotes the spec: " << message);
    BOOST_TEST(message.find(c.expected) != std::string::npos, c.spec << " -> " << message);
    BOOST_TEST(message.find('\n') == std::string::npos);
  }
  // A preset is quoted with its expansion; the cifar preset does not fit 8x8 images.
  const std::string message = error_of("cifar", {1, 8, 8});
  BOOST_TEST(message.find("--model cifar = 'conv3x3:32 relu maxpool2 conv3x3:64") == 0, message);
  BOOST_TEST(message.find("token 6 'maxpool2': a 2x2 window does not fit its 64x1x1 input") != std::string::npos,
             message);
}

// ---- res[<layers>]: the residual block (src/layers/residual.cpp)

namespace {

// Every view's name, offset, shape and fan-in: two layouts are the same when these are.
std::string layout_text(const Network& net) {
  std::string text;
  for (const cnn::ParamView& view : net.layout.views()) {
    text += view.name() + "@" + std::to_string(view.offset) + "[";
    for (const std::int64_t extent : view.shape) text += std::to_string(extent) + ",";
    text += "] fan_in " + std::to_string(view.fan_in) + "\n";
  }
  return text;
}

bool same_shape(const cnn::TensorShape& a, const cnn::TensorShape& b) {
  return a.channels == b.channels && a.height == b.height && a.width == b.width;
}

// The canonical spec builds the same network again: same spec, layers and layout.
void check_round_trip(const Network& net) {
  const Network again = build_network(net.spec, 0, net.input, net.classes);
  BOOST_TEST(again.spec == net.spec);
  BOOST_TEST(layout_text(again) == layout_text(net));
  BOOST_TEST(again.layers.size() == net.layers.size());
  BOOST_TEST(again.describe() == net.describe());
}

// A layer with parameters owns its weights and bias, back to back: [weight_offset, + param_count).
void check_param_layer(const Network& net, const cnn::Layer& layer, const std::string& name) {
  BOOST_TEST(layer.name == name);
  const cnn::ParamView& weight = net.layout.find(name + ".weight");
  const cnn::ParamView& bias = net.layout.find(name + ".bias");
  BOOST_TEST(layer.weight_offset == weight.offset, name);
  BOOST_TEST(layer.bias_offset == bias.offset, name);
  BOOST_TEST(bias.offset == weight.offset + weight.size, name);
  BOOST_TEST(layer.param_count == weight.size + bias.size, name);
}

// Multiply-adds of one image's forward pass through a conv layer.
double conv_macs(const cnn::Layer& layer) {
  return static_cast<double>(layer.out.size()) * layer.conv.channels * layer.conv.kernel * layer.conv.kernel;
}

}  // namespace

BOOST_AUTO_TEST_CASE(identity_block_keeps_the_shape_and_has_no_shortcut) {
  // Odd spacing: here the block's keyword and its ']' stand alone.
  const Network net = build_network("conv3x3:8/p1 relu res[ conv3x3:8/p1   relu conv3x3:8/p1 ] relu fc:10", 0,
                                    kFashion, 10);
  BOOST_TEST(net.spec == "conv3x3:8/p1 relu res[conv3x3:8/p1 relu conv3x3:8/p1] relu fc:10");
  BOOST_TEST_REQUIRE(net.layers.size() == 6u);  // conv relu res relu (flatten) fc
  const cnn::Layer& block = net.layers[2];
  BOOST_TEST((block.kind == cnn::LayerKind::kResidual));
  BOOST_TEST(std::string(cnn::layer_kind_name(block.kind)) == "residual");
  BOOST_TEST(same_shape(block.in, {8, 28, 28}));
  BOOST_TEST(same_shape(block.out, {8, 28, 28}));
  BOOST_TEST(block.shortcut.empty());
  BOOST_TEST_REQUIRE(block.body.size() == 3u);
  BOOST_TEST((block.body[0].kind == cnn::LayerKind::kConv));
  BOOST_TEST((block.body[1].kind == cnn::LayerKind::kRelu));
  BOOST_TEST((block.body[2].kind == cnn::LayerKind::kConv));
  // The body's shapes chain from the block's input to its output.
  BOOST_TEST(same_shape(block.body.front().in, block.in));
  for (std::size_t i = 1; i < block.body.size(); ++i) BOOST_TEST(same_shape(block.body[i].in, block.body[i - 1].out));
  BOOST_TEST(same_shape(block.body.back().out, block.out));
  // Tokens and columns of the spec as given: "res[" is token 3 at column 18, the inner layers tokens 4 to 6.
  BOOST_TEST(block.token == 3);
  BOOST_TEST(block.column == 18);
  BOOST_TEST(block.body[0].token == 4);
  BOOST_TEST(block.body[0].column == 23);
  BOOST_TEST(block.body[2].token == 6);
  BOOST_TEST(net.layers[3].token == 8);  // the relu after the "]" of token 7
  BOOST_TEST(names(net) == "conv1.weight conv1.bias conv2.weight conv2.bias conv3.weight conv3.bias fc.weight fc.bias");
  BOOST_TEST(!net.as_seed().has_value());
  check_round_trip(net);
  // Written against its layers, the block's keyword and "]" share their tokens: same network.
  const Network tight = build_network("conv3x3:8/p1 relu res[conv3x3:8/p1 relu conv3x3:8/p1] relu fc:10", 0, kFashion, 10);
  BOOST_TEST(tight.spec == net.spec);
  BOOST_TEST(layout_text(tight) == layout_text(net));
  BOOST_TEST(tight.layers[2].token == 3);
  BOOST_TEST(tight.layers[2].column == 18);
  BOOST_TEST(tight.layers[2].body[0].token == 3);
  BOOST_TEST(tight.layers[2].body[0].column == 22);  // after "res["
  BOOST_TEST(tight.layers[2].body[2].token == 5);
  BOOST_TEST(tight.layers[3].token == 6);

  // A block of a ReLU alone: no parameters, no offsets.
  const Network relu_only = build_network("conv3x3:4 res[relu] fc:10", 0, kFashion, 10);
  BOOST_TEST(relu_only.spec == "conv3x3:4 res[relu] fc:10");
  const cnn::Layer& relu_block = relu_only.layers[1];
  BOOST_TEST(relu_block.shortcut.empty());
  BOOST_TEST(!relu_block.has_params());
  BOOST_TEST(relu_block.weight_offset == -1);
  BOOST_TEST(relu_block.bias_offset == -1);
  BOOST_TEST(names(relu_only) == "conv1.weight conv1.bias fc.weight fc.bias");
  check_round_trip(relu_only);
}

BOOST_AUTO_TEST_CASE(projection_block_gets_one_strided_1x1_conv_shortcut) {
  const Network net = build_network("conv3x3:8/p1 relu res[conv3x3:16/s2/p1 relu conv3x3:16/p1] relu fc:10", 0,
                                    kFashion, 10);
  BOOST_TEST(net.spec == "conv3x3:8/p1 relu res[conv3x3:16/s2/p1 relu conv3x3:16/p1] relu fc:10");
  const cnn::Layer& block = net.layers[2];
  BOOST_TEST(same_shape(block.in, {8, 28, 28}));
  BOOST_TEST(same_shape(block.out, {16, 14, 14}));
  BOOST_TEST_REQUIRE(block.shortcut.size() == 1u);
  const cnn::Layer& shortcut = block.shortcut[0];
  BOOST_TEST((shortcut.kind == cnn::LayerKind::kConv));
  BOOST_TEST(shortcut.conv.kernel == 1);
  BOOST_TEST(shortcut.conv.stride == 2);
  BOOST_TEST(shortcut.conv.pad == 0);
  BOOST_TEST(shortcut.conv.channels == 8);
  BOOST_TEST(shortcut.conv.filters == 16);
  BOOST_TEST(same_shape(shortcut.in, block.in));
  BOOST_TEST(same_shape(shortcut.out, block.out));
  BOOST_TEST(shortcut.body.empty());
  // The canonical spec does not write the shortcut: it follows from the body.
  BOOST_TEST(net.spec.find("conv1x1") == std::string::npos);
  check_round_trip(net);

  // Other bodies: the stride S with (H - 1) / S + 1 == out H, and the same S for W.
  struct Case {
    std::string spec;
    cnn::TensorShape input, out;
    int stride;
  };
  const Case cases[] = {
      {"res[conv3x3:4/s3/p1] fc:10", kFashion, {4, 10, 10}, 3},           // (28 + 2 - 3) / 3 + 1 = 10 = 27 / 3 + 1
      {"res[conv3x3:6/p1] fc:10", kFashion, {6, 28, 28}, 1},              // the channels alone change
      {"res[conv3x3:2/p1 maxpool2] fc:10", kFashion, {2, 14, 14}, 2},     // a pool in the body
      {"res[conv3x3:4 relu maxpool2] fc:10", {1, 10, 10}, {4, 4, 4}, 3},  // 10 -> 8 -> 4 = 9 / 3 + 1
      {"res[conv3x3:4/s3/p1] fc:10", {2, 12, 20}, {4, 4, 7}, 3},          // non-square: 11 / 3 + 1, 19 / 3 + 1
  };
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT(c.spec << " on " << cnn::shape_text(c.input)) {
      const Network other = build_network(c.spec, 0, c.input, 10);
      const cnn::Layer& b = other.layers[0];
      BOOST_TEST(same_shape(b.out, c.out));
      BOOST_TEST_REQUIRE(b.shortcut.size() == 1u);
      BOOST_TEST(b.shortcut[0].conv.kernel == 1);
      BOOST_TEST(b.shortcut[0].conv.stride == c.stride);
      BOOST_TEST(b.shortcut[0].conv.channels == c.input.channels);
      BOOST_TEST(b.shortcut[0].conv.filters == c.out.channels);
      BOOST_TEST(same_shape(b.shortcut[0].out, c.out));
      check_round_trip(other);
    }
  }
}

BOOST_AUTO_TEST_CASE(parameters_are_numbered_and_laid_out_through_blocks) {
  // conv1 before the block; the body's conv2 and conv3, then the shortcut's conv4; then fc.
  const Network net = build_network("conv3x3:8/p1 relu res[conv3x3:16/s2/p1 relu conv3x3:16/p1] relu fc:10", 0,
                                    kFashion, 10);
  BOOST_TEST(names(net) ==
             "conv1.weight conv1.bias conv2.weight conv2.bias conv3.weight conv3.bias conv4.weight conv4.bias fc.weight "
             "fc.bias");
  const cnn::Layer& block = net.layers[2];
  check_param_layer(net, net.layers[0], "conv1");
  check_param_layer(net, block.body[0], "conv2");
  BOOST_TEST(block.body[1].name.empty());
  BOOST_TEST(block.body[1].weight_offset == -1);
  check_param_layer(net, block.body[2], "conv3");
  check_param_layer(net, block.shortcut[0], "conv4");
  check_param_layer(net, net.layers.back(), "fc");
  // Contiguous, in forward order: conv1 | conv2 conv3 conv4 (the block's span) | fc.
  BOOST_TEST(net.layers[0].weight_offset == 0);
  BOOST_TEST(block.body[0].weight_offset == net.layers[0].param_count);
  BOOST_TEST(block.body[2].weight_offset == block.body[0].weight_offset + block.body[0].param_count);
  BOOST_TEST(block.shortcut[0].weight_offset == block.body[2].weight_offset + block.body[2].param_count);
  BOOST_TEST(block.weight_offset == block.body[0].weight_offset);
  BOOST_TEST(block.bias_offset == -1);
  BOOST_TEST(block.param_count ==
             block.body[0].param_count + block.body[2].param_count + block.shortcut[0].param_count);
  BOOST_TEST(block.has_params());
  BOOST_TEST(net.layers.back().weight_offset == block.weight_offset + block.param_count);
  BOOST_TEST(net.layout.total() == net.layers.back().weight_offset + net.layers.back().param_count);
  // The shapes and fan-ins: conv2 [16, 8, 3, 3], conv3 [16, 16, 3, 3], the shortcut [16, 8, 1, 1] (fan-in 8).
  BOOST_TEST((net.layout.find("conv2.weight").shape == std::vector<std::int64_t>{16, 8, 3, 3}));
  BOOST_TEST((net.layout.find("conv3.weight").shape == std::vector<std::int64_t>{16, 16, 3, 3}));
  BOOST_TEST((net.layout.find("conv4.weight").shape == std::vector<std::int64_t>{16, 8, 1, 1}));
  BOOST_TEST(net.layout.find("conv4.weight").fan_in == 8);
  BOOST_TEST(net.layout.find("conv4.bias").size == 16);
  BOOST_TEST(net.layout.total() == 80 + (1152 + 16) + (2304 + 16) + (128 + 16) + (31360 + 10));
  BOOST_TEST(net.describe() == net.spec + " (input 1x28x28, 35,082 parameters)");

  // Two blocks: the numbering goes on through both (the first block's shortcut is conv2), and fc
  // layers keep their own numbering.
  const Network two = build_network("res[conv3x3:4/p1] res[conv3x3:4/p1 relu conv3x3:8/s2/p1] fc:16 relu fc:10", 0,
                                    kFashion, 10);
  BOOST_TEST(names(two) ==
             "conv1.weight conv1.bias conv2.weight conv2.bias conv3.weight conv3.bias conv4.weight conv4.bias "
             "conv5.weight conv5.bias fc1.weight fc1.bias fc2.weight fc2.bias");
  check_param_layer(two, two.layers[0].body[0], "conv1");
  check_param_layer(two, two.layers[0].shortcut[0], "conv2");
  BOOST_TEST(two.layers[0].shortcut[0].conv.stride == 1);
  check_param_layer(two, two.layers[1].body[0], "conv3");
  check_param_layer(two, two.layers[1].body[2], "conv4");
  check_param_layer(two, two.layers[1].shortcut[0], "conv5");
  BOOST_TEST(two.layers[1].shortcut[0].conv.stride == 2);
  BOOST_TEST(two.layers[0].weight_offset == 0);
  BOOST_TEST(two.layers[1].weight_offset == two.layers[0].param_count);
  check_round_trip(two);

  // block_network: a block's layers as a network of their own, for its op.
  const cnn::Network body = cnn::block_network(net, block, block.body);
  BOOST_TEST(same_shape(body.input, block.in));
  BOOST_TEST(body.classes == 10);
  BOOST_TEST_REQUIRE(body.layers.size() == 3u);
  BOOST_TEST(body.layers[2].weight_offset == block.body[2].weight_offset);
  BOOST_TEST(body.largest_activation() == 8 * 28 * 28);
}

BOOST_AUTO_TEST_CASE(flops_and_activations_count_the_layers_inside_blocks) {
  // An identity block of two 8 -> 8 convs after conv1: each conv runs forward, weight gradient and
  // input gradient (parameters before it), 3 x its multiply-adds; x2 for FLOPs.
  const std::string before = "conv3x3:8/p1 relu ", after = " relu fc:10";
  const Network with = build_network(before + "res[conv3x3:8/p1 relu conv3x3:8/p1]" + after, 0, kFashion, 10);
  const Network without = build_network(before + "relu" + after, 0, kFashion, 10);
  const double inner = conv_macs(with.layers[2].body[0]);
  BOOST_TEST(inner == 8.0 * 28 * 28 * 8 * 9);
  BOOST_TEST(with.flops_per_image() > without.flops_per_image());
  BOOST_TEST(with.flops_per_image() - without.flops_per_image() == 2.0 * 2 * 3 * inner);

  // A projection block after conv1: the shortcut conv counts too, with its input gradient.
  const Network projection = build_network(before + "res[conv3x3:16/s2/p1 relu conv3x3:16/p1]" + after, 0, kFashion, 10);
  const cnn::Layer& p = projection.layers[2];
  const double fc = 16.0 * 14 * 14 * 10;
  BOOST_TEST(projection.flops_per_image() ==
             2.0 * (2 * conv_macs(projection.layers[0]) +
                    3 * (conv_macs(p.body[0]) + conv_macs(p.body[2]) + conv_macs(p.shortcut[0]) + fc)));
  BOOST_TEST(conv_macs(p.shortcut[0]) == 16.0 * 14 * 14 * 8);

  // A block first: no input gradient out of its first conv, nor out of its shortcut (both read the
  // data); the body's second conv and the fc layer do pass one back.
  const Network first = build_network("res[conv3x3:8/s2/p1 relu conv3x3:8/p1] fc:10", 0, kFashion, 10);
  const cnn::Layer& f = first.layers[0];
  BOOST_TEST(first.flops_per_image() ==
             2.0 * (2 * conv_macs(f.body[0]) + 3 * conv_macs(f.body[2]) + 2 * conv_macs(f.shortcut[0]) +
                    3 * (8.0 * 14 * 14 * 10)));

  // The largest activation may be inside a block only: 64 x 28 x 28 between its two convs.
  const Network wide = build_network("res[conv3x3:64/p1 conv3x3:1/p1] fc:10", 0, kFashion, 10);
  BOOST_TEST(wide.largest_activation() == 64 * 28 * 28);
  BOOST_TEST(build_network("conv3x3:1/p1 conv3x3:1/p1 fc:10", 0, kFashion, 10).largest_activation() == 28 * 28);
}

BOOST_AUTO_TEST_CASE(bad_blocks_name_the_token) {
  struct Case {
    std::string spec, expected;
    cnn::TensorShape input = kFashion;
  };
  const Case cases[] = {
      {"res[] fc:10", "token 1 'res[]': a res block needs at least one layer"},
      {"conv3x3:8 res[ ] fc:10", "token 2 'res[': a res block needs at least one layer"},
      {"conv3x3:8 res[conv3x3:8/p1 relu", "token 2 'res[conv3x3:8/p1': the block has no closing ']'"},
      {"res[", "token 1 'res[': the block has no closing ']'"},
      {"conv3x3:8 ] fc:10", "token 2 ']': ']' closes no block"},
      {"conv3x3:8] fc:10", "token 1 'conv3x3:8]': ']' closes no block"},
      {"res[relu]] fc:10", "token 1 'res[relu]]': ']' closes no block"},
      {"res[conv3x3:8/p1 res[relu]] fc:10", "token 2 'res[relu]]': a block cannot hold another block"},
      // Two keywords in one token are split off both.
      {"res[res[relu] relu] fc:10", "token 1 'res[res[relu]': a block cannot hold another block"},
      {"res[res[relu]] fc:10", "token 1 'res[res[relu]]': a block cannot hold another block"},
      {"res[conv3x3:8/p1 fc:10] fc:10", "token 2 'fc:10]': a fc cannot stand inside a block: its layers keep C x H x W"},
      {"res[flatten] fc:10", "token 1 'res[flatten]': a flatten cannot stand inside a block"},
      {"fc:16 res[relu] fc:10", "token 2 'res[relu]': a residual needs C x H x W input, but it comes after a flatten or fc"},
      {"flatten res[relu] fc:10", "token 2 'res[relu]': a residual needs C x H x W input"},
      {"res[conv3x3:8/p1 rleu] fc:10", "token 2 'rleu]': unknown layer"},
      {"res[conv3x3:8/p1 conv3x3:0] fc:10", "token 2 'conv3x3:0]': the filter count must be at least 1"},
      // No stride S gives (28 - 1) / S + 1 == 26 (S = 1: 28, S = 2: 14), nor == 9 (S = 3: 10, S = 4: 7).
      {"res[conv3x3:8] fc:10",
       "token 1 'res[conv3x3:8]': its layers turn 1x28x28 into 8x26x26, which no 1x1 conv shortcut (stride S) can match"},
      {"conv3x3:4/p1 res[maxpool3] fc:10", "token 2 'res[maxpool3]': its layers turn 4x28x28 into 4x9x9, which no 1x1"},
      // 6 -> 3 needs S = 2, 7 -> 3 needs S = 3: each side matchable, not both with one stride.
      {"res[maxpool2] fc:10", "token 1 'res[maxpool2]': its layers turn 1x6x7 into 1x3x3, which no 1x1", {1, 6, 7}},
      // An inner layer that does not fit is named by its own token.
      {"res[conv3x3:4/p1 conv29x29:4] fc:10", "token 2 'conv29x29:4]': a 29x29 kernel does not fit its 4x28x28 input"},
      {"res[conv5x5:4] fc:10", "token 1 'res[conv5x5:4]': a 5x5 kernel does not fit its 1x4x4 input", {1, 4, 4}},
      {"res[maxpool2 maxpool2 maxpool2] fc:10", "token 3 'maxpool2]': a 2x2 window does not fit its 1x1x1 input",
       {1, 4, 4}},
      // The last layer is still checked when the spec ends with a block.
      {"conv3x3:8 res[relu]", "token 2 'res[relu]': the last layer must be fc:10"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of(c.spec, c.input);
    BOOST_TEST(message.find("--model '" + c.spec + "'") == 0, "quotes the spec: " << message);
    BOOST_TEST(message.find(c.expected) != std::string::npos, c.spec << " -> " << message);
    BOOST_TEST(message.find('\n') == std::string::npos);
  }
}
