// The ops the network builder picks (op_plan.hpp) for the seed and cifar presets on each target, and
// where a fused op must not be picked: `seq` never fuses, conv_relu_pool never stands after a layer
// with parameters, and the CUDA fusions only take the shapes their kernels are compiled for.
#define BOOST_TEST_MODULE op_plan
#include <string>

#include "boost_test.hpp"
#include "cnn/network.hpp"
#include "cnn/op_plan.hpp"

using cnn::FusionTarget;

namespace {

const cnn::TensorShape kFashion{1, 28, 28};
const cnn::TensorShape kCifar{3, 32, 32};

std::string ops_of(const std::string& model, cnn::TensorShape input, FusionTarget target, int filters = 32) {
  return cnn::describe_ops(cnn::plan_ops(cnn::build_network(model, filters, input, 10), target));
}

}  // namespace

BOOST_AUTO_TEST_CASE(seed_ops_on_every_target) {
  BOOST_TEST(ops_of("seed", kFashion, FusionTarget::kReference) == "conv relu maxpool fc softmax_cross_entropy");
  BOOST_TEST(ops_of("seed", kFashion, FusionTarget::kCpu) == "conv_relu_pool fc softmax_cross_entropy");
  BOOST_TEST(ops_of("seed", kFashion, FusionTarget::kCuda) == "conv_relu_pool_fc_softmax");
  BOOST_TEST(ops_of("seed", kFashion, FusionTarget::kCuda, 256) == "conv_relu_pool_fc_softmax");
  // The seed on CIFAR-10's 3 channels is still the seed.
  BOOST_TEST(ops_of("seed", kCifar, FusionTarget::kCuda) == "conv_relu_pool_fc_softmax");
}

BOOST_AUTO_TEST_CASE(cifar_ops_on_every_target) {
  BOOST_TEST(ops_of("cifar", kCifar, FusionTarget::kReference) ==
             "conv relu maxpool conv relu maxpool conv relu fc relu fc softmax_cross_entropy");
  BOOST_TEST(ops_of("cifar", kCifar, FusionTarget::kCpu) ==
             "conv_relu_pool conv relu maxpool conv relu fc relu fc softmax_cross_entropy");
  BOOST_TEST(ops_of("cifar", kCifar, FusionTarget::kCuda) ==
             "conv_relu_pool conv+relu maxpool conv+relu fc+relu fc softmax_cross_entropy");
}

BOOST_AUTO_TEST_CASE(op_fields_cover_the_layers_and_the_gradients_they_need) {
  const cnn::Network net = cnn::build_network("cifar", 32, kCifar, 10);
  const std::vector<cnn::Op> ops = cnn::plan_ops(net, FusionTarget::kCuda);
  BOOST_REQUIRE(ops.size() == 7u);
  // conv_relu_pool: layers 0..2, the first op, so it reads the uint8 data itself; no input gradient.
  BOOST_TEST(ops[0].first_layer == 0u);
  BOOST_TEST(ops[0].last_layer == 2u);
  BOOST_TEST(ops[0].reads_data);
  BOOST_TEST(!ops[0].needs_input_grad);
  // conv2+relu: layers 3..4, after parameters.
  BOOST_TEST(ops[1].first_layer == 3u);
  BOOST_TEST(ops[1].last_layer == 4u);
  BOOST_TEST(ops[1].relu_after);
  BOOST_TEST(ops[1].needs_input_grad);
  BOOST_TEST(!ops[1].reads_data);
  // Every layer is run by exactly one op, in order (cifar's implicit flatten before fc1 included).
  std::size_t next = 0;
  for (std::size_t k = 0; k + 1 < ops.size(); ++k) {
    BOOST_TEST(ops[k].first_layer == next);
    next = ops[k].last_layer + 1;
    if (next < net.layers.size() && net.layers[next].kind == cnn::LayerKind::kFlatten) ++next;
  }
  BOOST_TEST(next == net.layers.size());
  BOOST_TEST(ops.back().first_layer == net.layers.size());
  BOOST_TEST(cnn::param_layers(net, ops[0]).size() == 1u);
  BOOST_TEST(cnn::param_layers(net, ops[2]).empty());
  // On the CPU the same op is not the first to read data (the CPU gathers floats first).
  BOOST_TEST(!cnn::plan_ops(net, FusionTarget::kCpu)[0].reads_data);
}

BOOST_AUTO_TEST_CASE(fused_ops_only_where_valid) {
  // After a layer with parameters a conv needs its input gradient: no conv_relu_pool there.
  BOOST_TEST(ops_of("conv3x3:8 relu maxpool2 conv3x3:8 relu maxpool2 fc:10", kCifar, FusionTarget::kCpu) ==
             "conv_relu_pool conv relu maxpool fc softmax_cross_entropy");
  // Padding, stride or a different pool: no fusion anywhere.
  BOOST_TEST(ops_of("conv3x3:8/p1 relu maxpool2 fc:10", kFashion, FusionTarget::kCpu) ==
             "conv relu maxpool fc softmax_cross_entropy");
  BOOST_TEST(ops_of("conv3x3:8 relu maxpool2/s1 fc:10", kFashion, FusionTarget::kCuda) ==
             "conv+relu maxpool fc softmax_cross_entropy");
  // A 5x5 kernel: the CPU op takes any kernel, the CUDA kernels are compiled for 3x3 only.
  BOOST_TEST(ops_of("conv5x5:8 relu maxpool2 fc:10", kFashion, FusionTarget::kCpu) ==
             "conv_relu_pool fc softmax_cross_entropy");
  BOOST_TEST(ops_of("conv5x5:8 relu maxpool2 fc:10", kFashion, FusionTarget::kCuda) ==
             "conv+relu maxpool fc softmax_cross_entropy");
  // Two channels: not a compiled shape.
  BOOST_TEST(ops_of("seed", cnn::TensorShape{2, 28, 28}, FusionTarget::kCuda) ==
             "conv+relu maxpool fc softmax_cross_entropy");
  // A ReLU folds once; a second one stays an op, and one after a pool is its own op too.
  BOOST_TEST(ops_of("fc:16 relu relu fc:10", kFashion, FusionTarget::kCuda) == "fc+relu relu fc softmax_cross_entropy");
  BOOST_TEST(ops_of("conv3x3:8 maxpool2 relu fc:10", kFashion, FusionTarget::kCuda) ==
             "conv maxpool relu fc softmax_cross_entropy");
  // The seed shape with more classes is no CUDA seed op (its head is compiled for 10).
  BOOST_TEST(cnn::describe_ops(cnn::plan_ops(cnn::build_network("seed", 8, kFashion, 12), FusionTarget::kCuda)) ==
             "conv+relu maxpool fc softmax_cross_entropy");
}
