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
             "conv_relu_pool conv+relu maxpool conv+relu fc+relu fc_softmax");
}

BOOST_AUTO_TEST_CASE(op_fields_cover_the_layers_and_the_gradients_they_need) {
  const cnn::Network net = cnn::build_network("cifar", 32, kCifar, 10);
  const std::vector<cnn::Op> ops = cnn::plan_ops(net, FusionTarget::kCuda);
  BOOST_REQUIRE(ops.size() == 6u);
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
  // Every layer is run by exactly one op, in order (cifar's implicit flatten before fc1 included); the
  // last, fc_softmax, runs fc2 and the loss (last_layer: one past the layers).
  std::size_t next = 0;
  for (const cnn::Op& op : ops) {
    BOOST_TEST(op.first_layer == next);
    next = op.last_layer + 1;
    if (next < net.layers.size() && net.layers[next].kind == cnn::LayerKind::kFlatten) ++next;
  }
  BOOST_TEST(next == net.layers.size() + 1);
  BOOST_TEST((ops.back().kind == cnn::OpKind::kFcSoftmax));
  BOOST_TEST(ops.back().first_layer == net.layers.size() - 1);
  BOOST_TEST(ops.back().last_layer == net.layers.size());
  BOOST_TEST(ops.back().has_params);
  BOOST_TEST(ops.back().needs_input_grad);
  BOOST_TEST(cnn::param_layers(net, ops.back()).size() == 1u);
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
             "conv+relu maxpool fc softmax_cross_entropy");  // 25x25x8 = 5000 fc inputs: no fc_softmax
  // A 5x5 kernel: the CPU op takes any kernel, the CUDA kernels are compiled for 3x3 only.
  BOOST_TEST(ops_of("conv5x5:8 relu maxpool2 fc:10", kFashion, FusionTarget::kCpu) ==
             "conv_relu_pool fc softmax_cross_entropy");
  BOOST_TEST(ops_of("conv5x5:8 relu maxpool2 fc:10", kFashion, FusionTarget::kCuda) ==
             "conv+relu maxpool fc_softmax");
  // Two channels: not a compiled shape.
  BOOST_TEST(ops_of("seed", cnn::TensorShape{2, 28, 28}, FusionTarget::kCuda) ==
             "conv+relu maxpool fc softmax_cross_entropy");  // 13x13x32 = 5408 fc inputs
  // A ReLU folds once; a second one stays an op, and one after a pool is its own op too.
  BOOST_TEST(ops_of("fc:16 relu relu fc:10", kFashion, FusionTarget::kCuda) == "fc+relu relu fc_softmax");
  BOOST_TEST(ops_of("conv3x3:8 maxpool2 relu fc:10", kFashion, FusionTarget::kCuda) ==
             "conv maxpool relu fc_softmax");
  // The last fc layer takes the loss in on the GPU only, with 10 outputs and at most
  // kCudaFcSoftmaxMaxInputs inputs; with no earlier parameters it passes no gradient back.
  BOOST_TEST(ops_of("fc:10", kFashion, FusionTarget::kCuda) == "fc_softmax");
  BOOST_TEST(!cnn::plan_ops(cnn::build_network("fc:10", 0, kFashion, 10), FusionTarget::kCuda).back().needs_input_grad);
  BOOST_TEST(ops_of("fc:10", kFashion, FusionTarget::kCpu) == "fc softmax_cross_entropy");
  BOOST_TEST(ops_of("fc:10", cnn::TensorShape{1, 64, 64}, FusionTarget::kCuda) == "fc_softmax");  // 4096 inputs
  BOOST_TEST(ops_of("fc:10", cnn::TensorShape{1, 65, 64}, FusionTarget::kCuda) == "fc softmax_cross_entropy");
  // The seed shape with more classes is no CUDA seed op (its head is compiled for 10), nor fc_softmax.
  BOOST_TEST(cnn::describe_ops(cnn::plan_ops(cnn::build_network("seed", 8, kFashion, 12), FusionTarget::kCuda)) ==
             "conv+relu maxpool fc softmax_cross_entropy");
}

// ---- residual blocks (res[...]): one op whose body and shortcut are plans of their own

BOOST_AUTO_TEST_CASE(residual_ops_on_every_target) {
  const std::string model =
      "conv3x3:8/p1 relu res[conv3x3:8/p1 relu conv3x3:8/p1] relu res[conv3x3:16/s2/p1 relu conv3x3:16/p1] relu "
      "maxpool2 fc:10";
  BOOST_TEST(ops_of(model, kFashion, FusionTarget::kReference) ==
             "conv relu res[conv relu conv] relu res[conv relu conv | conv] relu maxpool fc softmax_cross_entropy");
  BOOST_TEST(ops_of(model, kFashion, FusionTarget::kCpu) ==
             "conv relu res[conv relu conv] relu res[conv relu conv | conv] relu maxpool fc softmax_cross_entropy");
  // On the GPU a ReLU folds into the conv before it inside the body too; the ReLU after a block stays
  // an op (the block's sum has no store to fold it into).
  BOOST_TEST(ops_of(model, kFashion, FusionTarget::kCuda) ==
             "conv+relu res[conv+relu conv] relu res[conv+relu conv | conv] relu maxpool fc_softmax");
  // A body that ends with a ReLU: folded into its last conv on the GPU.
  BOOST_TEST(ops_of("conv3x3:8/p1 relu res[conv3x3:8/p1 relu conv3x3:8/p1 relu] fc:10", kFashion, FusionTarget::kCuda) ==
             "conv+relu res[conv+relu conv+relu] fc softmax_cross_entropy");  // 28x28x8 fc inputs: no fc_softmax
  // A body that starts with a ReLU: nothing before it in the body to fold into.
  BOOST_TEST(ops_of("conv3x3:8/p1 res[relu conv3x3:8/p1] fc:10", kFashion, FusionTarget::kCuda) ==
             "conv res[relu conv] fc softmax_cross_entropy");
  // A conv KxK + relu + maxpool2 inside a block is never conv_relu_pool (it passes no input gradient
  // and reads no data), though the same layers first at the top level are.
  const cnn::TensorShape small{1, 10, 10};  // 10 -> 8 -> 4, the shortcut's stride 3
  BOOST_TEST(ops_of("res[conv3x3:4 relu maxpool2] fc:10", small, FusionTarget::kCpu) ==
             "res[conv relu maxpool | conv] fc softmax_cross_entropy");
  BOOST_TEST(ops_of("res[conv3x3:4 relu maxpool2] fc:10", small, FusionTarget::kCuda) ==
             "res[conv+relu maxpool | conv] fc_softmax");
  BOOST_TEST(ops_of("conv3x3:4 relu maxpool2 fc:10", small, FusionTarget::kCpu) == "conv_relu_pool fc softmax_cross_entropy");
  // After a block with parameters, no conv_relu_pool either (it would need the input gradient).
  BOOST_TEST(ops_of("res[conv3x3:1/p1] conv3x3:4 relu maxpool2 fc:10", small, FusionTarget::kCpu) ==
             "res[conv] conv relu maxpool fc softmax_cross_entropy");
  // A block of no parameters before it leaves conv_relu_pool possible.
  BOOST_TEST(ops_of("res[relu] conv3x3:4 relu maxpool2 fc:10", small, FusionTarget::kCpu) ==
             "res[relu] conv_relu_pool fc softmax_cross_entropy");
  // After a block, the last fc layer takes the loss in where it has at most 4096 inputs (14x14x8 here).
  BOOST_TEST(ops_of("conv3x3:8/p1 relu res[conv3x3:8/p1 relu conv3x3:8/p1 relu] maxpool2 fc:10", kFashion,
                    FusionTarget::kCuda) == "conv+relu res[conv+relu conv+relu] maxpool fc_softmax");
  // A block is never the seed model's whole-model op.
  BOOST_TEST(ops_of("res[conv3x3:8/p1] fc:10", kFashion, FusionTarget::kCuda) ==
             "res[conv | conv] fc softmax_cross_entropy");
}

BOOST_AUTO_TEST_CASE(residual_op_fields_and_the_gradients_inner_ops_pass_back) {
  for (const FusionTarget target : {FusionTarget::kReference, FusionTarget::kCpu, FusionTarget::kCuda}) {
    BOOST_TEST_CONTEXT("target " << static_cast<int>(target)) {
      // After a conv: the block passes a gradient back, and so do the first ops of its body and shortcut.
      const cnn::Network net = cnn::build_network("conv3x3:8/p1 relu res[conv3x3:16/s2/p1 relu conv3x3:16/p1] relu fc:10",
                                                  0, kFashion, 10);
      const std::vector<cnn::Op> ops = cnn::plan_ops(net, target);
      const std::size_t at = target == FusionTarget::kCuda ? 1 : 2;  // conv+relu is one op on the GPU
      BOOST_TEST_REQUIRE(ops.size() > at);
      const cnn::Op& block = ops[at];
      BOOST_TEST((block.kind == cnn::OpKind::kLayer));
      BOOST_TEST((block.layer == cnn::LayerKind::kResidual));
      BOOST_TEST(block.first_layer == 2u);
      BOOST_TEST(block.last_layer == 2u);
      BOOST_TEST(block.has_params);
      BOOST_TEST(block.needs_input_grad);
      BOOST_TEST(!block.relu_after);
      BOOST_TEST(!block.reads_data);
      BOOST_TEST_REQUIRE(!block.body.empty());
      BOOST_TEST_REQUIRE(block.shortcut.size() == 1u);
      for (const cnn::Op& inner : block.body) BOOST_TEST(inner.needs_input_grad);
      BOOST_TEST(block.shortcut[0].needs_input_grad);
      BOOST_TEST(block.shortcut[0].has_params);
      BOOST_TEST(!block.shortcut[0].reads_data);
      // The inner ops index the block's layers (block_network), not the network's.
      const cnn::Network body = cnn::block_network(net, net.layers[2], net.layers[2].body);
      BOOST_TEST(block.body.front().first_layer == 0u);
      BOOST_TEST(block.body.back().last_layer == body.layers.size() - 1);
      BOOST_TEST_REQUIRE(cnn::param_layers(body, block.body.front()).size() == 1u);
      BOOST_TEST(cnn::param_layers(body, block.body.front())[0]->name == "conv2");
      const cnn::Network shortcut = cnn::block_network(net, net.layers[2], net.layers[2].shortcut);
      BOOST_TEST(cnn::param_layers(shortcut, block.shortcut[0])[0]->name == "conv4");
      // param_layers of the block op: the block (its span covers conv2..conv4).
      BOOST_TEST_REQUIRE(cnn::param_layers(net, block).size() == 1u);
      BOOST_TEST(cnn::param_layers(net, block)[0] == &net.layers[2]);
      // The ops after the block pass a gradient back; the loss is last.
      for (std::size_t k = at + 1; k < ops.size(); ++k) BOOST_TEST(ops[k].needs_input_grad);

      // The block first: nothing before it has parameters, so neither its body's first op nor its
      // shortcut passes a gradient back; the body's ops after its first conv do.
      const cnn::Network first = cnn::build_network("res[conv3x3:8/s2/p1 relu conv3x3:8/p1] relu fc:10", 0, kFashion, 10);
      const std::vector<cnn::Op> first_ops = cnn::plan_ops(first, target);
      const cnn::Op& b = first_ops.at(0);
      BOOST_TEST(!b.needs_input_grad);
      BOOST_TEST(!b.reads_data);  // not a fused op: the backend gathers the floats first
      BOOST_TEST(b.has_params);
      BOOST_TEST_REQUIRE(b.body.size() >= 2u);
      BOOST_TEST(!b.body[0].needs_input_grad);
      for (std::size_t k = 1; k < b.body.size(); ++k) BOOST_TEST(b.body[k].needs_input_grad);
      BOOST_TEST_REQUIRE(b.shortcut.size() == 1u);
      BOOST_TEST(!b.shortcut[0].needs_input_grad);  // not after the body's convs: it reads the block's input
      for (std::size_t k = 1; k < first_ops.size(); ++k) BOOST_TEST(first_ops[k].needs_input_grad);

      // A body that starts with a ReLU, first: the ReLU and the conv after it pass nothing back.
      const cnn::Network relu_first = cnn::build_network("res[relu conv3x3:1/p1 relu conv3x3:1/p1] fc:10", 0, kFashion, 10);
      const std::vector<cnn::Op> relu_first_ops = cnn::plan_ops(relu_first, target);
      const cnn::Op& r = relu_first_ops.at(0);
      BOOST_TEST(r.shortcut.empty());
      BOOST_TEST_REQUIRE(!r.body.empty());
      BOOST_TEST(r.body[0].name() == "relu");
      BOOST_TEST(!r.body[0].needs_input_grad);
      BOOST_TEST(!r.body[1].needs_input_grad);
      BOOST_TEST(r.body.back().needs_input_grad);

      // A block without parameters: the conv after it needs no input gradient.
      const cnn::Network no_params = cnn::build_network("res[relu] conv3x3:4/p1 fc:10", 0, kFashion, 10);
      const std::vector<cnn::Op> np = cnn::plan_ops(no_params, target);
      BOOST_TEST(!np.at(0).has_params);
      BOOST_TEST(!np.at(0).needs_input_grad);
      BOOST_TEST(!np.at(0).body.at(0).needs_input_grad);
      BOOST_TEST(!np.at(1).needs_input_grad);
      BOOST_TEST(np.at(2).needs_input_grad);
    }
  }
}
