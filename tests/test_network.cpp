// --model SPEC: presets, shapes, canonical specs, parameter names and the seed's fused-path test;
// bad specs each give a UsageError (exit 2) whose one line quotes the spec and names the bad token.
#define BOOST_TEST_MODULE network
#include <string>

#include "boost_test.hpp"
#include "cnn/errors.hpp"
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
