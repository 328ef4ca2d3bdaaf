// The cuda backend on layer networks against `seq` (the CPU reference), and its fused ops against the
// layer ops they replace:
//   1. the cifar preset's loss and every gradient, a strided/padded network, and three Adam steps; a
//      cosine lr with warm-up, weight decay, Nesterov, AdamW and label smoothing on the seed op and a
//      layer network; average pools and dropout; residual networks (res[...]) with identity and
//      projection shortcuts, a block after a ReLU (the identity's gradient masked), a block first, a
//      body that starts with a ReLU and one whose last conv folds a ReLU in, with the CUDA plan and
//      with nothing folded;
//   2. its fused ops, on the GPU and against `seq`: the seed model's conv_relu_pool_fc_softmax against
//      conv_relu_pool + fc and against every layer on its own, the cifar preset's first
//      conv_relu_pool against conv, relu and maxpool, and the last fc layer's fc_softmax against the
//      fc op and the softmax_cross_entropy op (the op lists come from plan_ops for other targets, or
//      are edited, through make_cuda_backend(options, network, ops)).
// The ops one by one: gpu_layers.cpp; determinism and the overlapped step: gpu_layer_determinism.cpp.
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_layer_networks
#include "boost_test.hpp"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cnn/layer_registry.hpp"
#include "cnn/lr_schedule.hpp"
#include "cnn/model.hpp"
#include "cnn/network.hpp"
#include "cnn/op_plan.hpp"
#include "cnn/optimizer.hpp"
#include "gpu_layer_runs.hpp"
#include "gpu_test_util.hpp"

namespace {

using namespace cnn::gpu_test;  // tests/gpu_test_util.hpp, gpu_layer_runs.hpp
using cnn::gpu_test::random_data;  // over glibc's struct random_data (stdlib.h)

struct RequireGpu {
  RequireGpu() { require_gpu(); }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

// Whole steps through five layers: the same, compounded, plus the rare ReLU or pool near-tie.
constexpr double kStepTolerance = 1e-4;

// ---- 1. layer networks against seq ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(cifar_preset_matches_seq) {
  const cnn::Network net = cnn::build_network("cifar", 32, {3, 32, 32}, 10);
  const RandomData data = random_data(net.input, 400, 150, 51);
  for (auto optimizer : {cnn::OptimizerKind::kSgd, cnn::OptimizerKind::kAdam}) {
    BOOST_TEST_CONTEXT("cifar, " << cnn::optimizer_name(optimizer)) {
      const int steps = optimizer == cnn::OptimizerKind::kSgd ? 1 : 3;
      const Run seq = train("seq", net, data, optimizer, steps, 77);
      const Run gpu = train("cuda", net, data, optimizer, steps, 77);
      std::printf("cifar preset, %s, %d step(s): %s vs seq\n", cnn::optimizer_name(optimizer), steps,
                  gpu.description.c_str());
      BOOST_TEST(gpu.description.find("ops conv_relu_pool conv+relu maxpool conv+relu fc+relu fc_softmax,") !=
                     std::string::npos,
                 gpu.description);
      check_against(gpu, seq, net, kStepTolerance);
      if (optimizer == cnn::OptimizerKind::kAdam) CHECK_REL(gpu.state, seq.state, kStepTolerance, "adam state");
    }
  }
}

// Stride, padding, an even kernel, overlapping pool windows, a ReLU after a pool and two fc layers.
BOOST_AUTO_TEST_CASE(strided_padded_network_matches_seq) {
  const cnn::Network net = cnn::build_network("conv3x3:8/s2/p1 relu conv4x4:6/p2 maxpool3/s2 relu conv1x1:5 relu "
                                              "flatten fc:16 relu fc:10",
                                              0, {3, 17, 15}, 10);
  const RandomData data = random_data(net.input, 300, 60, 52);
  const Run seq = train("seq", net, data, cnn::OptimizerKind::kMomentum, 2, 50);
  const Run gpu = train("cuda", net, data, cnn::OptimizerKind::kMomentum, 2, 50);
  std::printf("%s: %s vs seq\n", net.describe().c_str(), gpu.description.c_str());
  check_against(gpu, seq, net, kStepTolerance);
}

// Issue 26: a cosine lr with warm-up, so every step's update has a new lr while the steps replay their
// CUDA graphs (the update runs after the graph, its lr a plain argument), with weight decay, Nesterov
// momentum or AdamW's decoupled decay, and label smoothing in the loss: on the fused seed op (its own
// loss kernel) and on a layer network (its last fc layer and the loss: the fc_softmax op), against
// `seq`, and graphs
// against eager steps bit for bit.
BOOST_AUTO_TEST_CASE(schedule_and_regularisers_match_seq_through_graph_replays) {
  struct Case {
    const char* spec;
    int filters;
    cnn::TensorShape input;
    cnn::OptimizerKind optimizer;
    const char* cuda_ops;
  };
  const Case cases[] = {
      {"seed", 8, {1, 28, 28}, cnn::OptimizerKind::kMomentum, "ops conv_relu_pool_fc_softmax,"},
      {"seed", 8, {1, 28, 28}, cnn::OptimizerKind::kAdamW, "ops conv_relu_pool_fc_softmax,"},
      {"conv3x3:8/p1 relu maxpool2 conv3x3:8/p1 relu fc:16 relu fc:10", 0, {3, 16, 16},
       cnn::OptimizerKind::kMomentum, "fc+relu fc_softmax,"},
      {"conv3x3:8/p1 relu maxpool2 conv3x3:8/p1 relu fc:16 relu fc:10", 0, {3, 16, 16}, cnn::OptimizerKind::kAdam,
       "fc+relu fc_softmax,"},
  };
  constexpr int kSteps = 6;
  std::uint32_t seed = 60;
  for (const Case& c : cases) {
    const cnn::Network net = cnn::build_network(c.spec, c.filters, c.input, 10);
    const RandomData data = random_data(net.input, 400, 60, seed++);
    const bool adam = c.optimizer != cnn::OptimizerKind::kMomentum;
    const cnn::LearningRate lr(adam ? 2e-3 : 0.08, cnn::parse_lr_schedule("cosine"), 2, kSteps, kSteps);
    Regime regime;
    regime.weight_decay = adam ? 0.05f : 5e-3f;
    regime.nesterov = !adam;
    regime.label_smoothing = 0.1f;
    regime.lr = &lr;
    BOOST_TEST_CONTEXT(c.spec << ", " << cnn::optimizer_name(c.optimizer)) {
      const Run seq = train("seq", net, data, c.optimizer, kSteps, 50, true, {}, regime);
      const Run gpu = train("cuda", net, data, c.optimizer, kSteps, 50, true, {}, regime);
      const Run eager = train("cuda", net, data, c.optimizer, kSteps, 50, false, {}, regime);
      std::printf("%s, %s, cosine + warm-up, decay, smoothing: %s vs seq\n", net.describe().c_str(),
                  cnn::optimizer_name(c.optimizer), gpu.description.c_str());
      BOOST_TEST(gpu.description.find(c.cuda_ops) != std::string::npos, gpu.description);
      check_against(gpu, seq, net, kStepTolerance);
      CHECK_REL(gpu.state, seq.state, kStepTolerance, "optimizer state");
      BOOST_TEST(bitwise_equal(gpu.params, eager.params), "graph and eager runs differ");
      BOOST_TEST(bitwise_equal(gpu.state, eager.state), "graph and eager optimizer states differ");
    }
  }
}

// Residual blocks (kernels/layers/residual.cu) against `seq`: each network with the CUDA plan (ReLUs
// folded into the convs before them, inside bodies too) and with the reference plan (every layer its
// own op, nothing folded), three Adam steps. Where the block's input is a ReLU's output the gradient
// out of the block is masked by its first ops and by the identity's add; where its body's last conv
// folds a ReLU, the block takes the gradient before that ReLU itself.
void check_residual_network(const char* spec, cnn::TensorShape input, std::uint32_t seed) {
  const cnn::Network net = cnn::build_network(spec, 0, input, 10);
  const RandomData data = random_data(net.input, 300, 60, seed);
  const std::vector<cnn::Op> cuda_ops = cnn::plan_ops(net, cnn::FusionTarget::kCuda);
  const Run seq = train("seq", net, data, cnn::OptimizerKind::kAdam, 3, 64);
  const Run gpu = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 64);
  const Run eager = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 64, false);
  const Run unfused = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 64, true, unfused_ops(net));
  BOOST_TEST_CONTEXT(spec << " on " << cnn::shape_text(input)) {
    std::printf("%s: %s and %s vs seq\n", net.describe().c_str(), gpu.description.c_str(), unfused.description.c_str());
    BOOST_TEST(gpu.description.find(ops_text(cuda_ops)) != std::string::npos, gpu.description);
    BOOST_TEST(unfused.description.find(ops_text(unfused_ops(net))) != std::string::npos, unfused.description);
    check_against(gpu, seq, net, kStepTolerance);
    check_against(unfused, seq, net, kStepTolerance);
    BOOST_TEST(bitwise_equal(gpu.params, eager.params), "graph and eager runs differ");
    CHECK_REL(gpu.state, seq.state, kStepTolerance, "adam state");
  }
}

// Average pools (windowed, global, after folded ReLUs, in a block) and dropout (after a pool, after an
// fc, first, in a block): the cuda plan, eager and unfused, against seq. The masks of each step come
// from the MaskOrigin written before it, so a graph replay drops what seq drops at that step.
BOOST_AUTO_TEST_CASE(pooling_and_dropout_networks_match_seq) {
  check_residual_network("conv3x3:8/p1 relu avgpool2 dropout:0.25 conv3x3:8/p1 relu avgpool fc:32 relu dropout:0.5 fc:10",
                         {3, 16, 16}, 91);
  check_residual_network("conv3x3:8/p1 relu res[conv3x3:8/p1 dropout:0.3 relu avgpool2] avgpool3/s1 fc:10", {3, 16, 16},
                         92);
  check_residual_network("dropout:0.2 conv3x3:8 relu avgpool3/s2 fc:10", {1, 28, 28}, 93);
}

BOOST_AUTO_TEST_CASE(residual_networks_match_seq) {
  struct Case {
    const char* spec;
    cnn::TensorShape input;
    const char* cuda_ops;  // what the CUDA plan makes of it
  };
  const Case cases[] = {
      // An identity block right after a ReLU (folded into conv1: the block's input is a ReLU's output).
      {"conv3x3:8/p1 relu res[conv3x3:8/p1 relu conv3x3:8/p1] relu maxpool2 fc:10", {3, 16, 16},
       "conv+relu res[conv+relu conv] relu maxpool fc_softmax"},
      // A projection block (stride 2), then a block whose body ends with a max-pool: 16 -> 8 -> 4.
      {"conv3x3:8/p1 relu res[conv3x3:16/s2/p1 relu conv3x3:16/p1] relu res[conv3x3:16/p1 relu maxpool2] fc:10",
       {3, 16, 16}, "conv+relu res[conv+relu conv | conv] relu res[conv+relu maxpool | conv] fc_softmax"},
      // A block as the first layer: no gradient out of its body's first conv nor out of its shortcut.
      {"res[conv3x3:8/s2/p1 relu conv3x3:8/p1] relu maxpool2 fc:10", {1, 28, 28},
       "res[conv+relu conv | conv] relu maxpool fc_softmax"},
      // A body that starts with a ReLU, after a conv with none (the block's input is no ReLU's output).
      {"conv3x3:8/p1 res[relu conv3x3:8/p1 relu conv3x3:8/p1] maxpool2 fc:10", {3, 16, 16},
       "conv res[relu conv+relu conv] maxpool fc_softmax"},
      // The body's last conv folds a ReLU: identity, and projection with a ReLU after the sum.
      {"conv3x3:8/p1 relu res[conv3x3:8/p1 relu conv3x3:8/p1 relu] fc:10", {3, 16, 16},
       "conv+relu res[conv+relu conv+relu] fc_softmax"},
      {"conv3x3:8/p1 relu res[conv3x3:16/s2/p1 relu conv3x3:16/p1 relu] relu fc:10", {3, 16, 16},
       "conv+relu res[conv+relu conv+relu | conv] relu fc_softmax"},
      // A block without parameters, then the fused first conv_relu_pool (reading floats: not the first op),
      // then an identity block after it.
      {"res[relu] conv3x3:8 relu maxpool2 res[conv3x3:8/p1] relu fc:10", {3, 16, 16},
       "res[relu] conv_relu_pool res[conv] relu fc_softmax"},
  };
  std::uint32_t seed = 90;
  for (const Case& c : cases) {
    BOOST_TEST(cnn::describe_ops(cnn::plan_ops(cnn::build_network(c.spec, 0, c.input, 10), cnn::FusionTarget::kCuda)) ==
               c.cuda_ops);
    check_residual_network(c.spec, c.input, seed++);
  }
}

// A block that passes no gradient back (nothing with parameters before it) whose body starts with a
// layer without parameters. (`seq`'s CPU block op must stop its body's backward at the first conv.)
BOOST_AUTO_TEST_CASE(residual_block_first_with_a_body_that_starts_without_parameters) {
  check_residual_network("res[relu conv3x3:3/p1] relu conv3x3:8/p1 relu maxpool2 fc:10", {3, 16, 16}, 97);
  check_residual_network("maxpool2 res[relu conv3x3:6/p1 relu conv3x3:6/p1] fc:10", {3, 16, 16}, 98);
  check_residual_network("res[maxpool2 conv3x3:8/p1] relu fc:10", {1, 28, 28}, 99);
}

// ---- 2. fused ops against the layer ops they replace ------------------------------------------------

// The first conv3x3 + ReLU + maxpool2 of the cifar preset runs as the fused op conv_relu_pool,
// reading the uint8 data set and saving input patches since it is the first op: against the same
// layers one by one on the GPU (conv, relu, maxpool, nothing folded) and against seq, on CIFAR's
// 3x32x32 and on Fashion-MNIST's 1x28x28 (an odd 13x13 pool output after conv2). Behind a max-pool,
// the fused op reads the float activations instead.
BOOST_AUTO_TEST_CASE(fused_first_conv_pool_matches_layer_by_layer) {
  struct Case {
    const char* spec;
    cnn::TensorShape input;
  };
  for (const Case& c : {Case{"cifar", {3, 32, 32}}, Case{"cifar", {1, 28, 28}},
                        Case{"maxpool2 conv3x3:8 relu maxpool2 flatten fc:10", {3, 30, 30}}}) {
    const cnn::Network net = cnn::build_network(c.spec, 32, c.input, 10);
    const RandomData data = random_data(net.input, 300, 80, 55);
    const std::vector<cnn::Op> fused_ops = cnn::plan_ops(net, cnn::FusionTarget::kCuda);
    const Run fused = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 64);
    const Run layers = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 64, true, unfused_ops(net));
    const Run seq = train("seq", net, data, cnn::OptimizerKind::kAdam, 3, 64);
    BOOST_TEST_CONTEXT(c.spec << " on " << c.input.channels << "x" << c.input.height << "x" << c.input.width) {
      std::printf("%s on %dx%dx%d: %s vs %s\n", c.spec, c.input.channels, c.input.height, c.input.width,
                  fused.description.c_str(), layers.description.c_str());
      BOOST_TEST(fused_ops.at(fused_ops.front().name() == "maxpool" ? 1 : 0).name() == "conv_relu_pool");
      BOOST_TEST(fused.description.find(ops_text(fused_ops)) != std::string::npos, fused.description);
      BOOST_TEST(layers.description.find(ops_text(unfused_ops(net))) != std::string::npos, layers.description);
      BOOST_TEST(layers.description.find("conv_relu_pool") == std::string::npos);
      check_against(fused, layers, net, kStepTolerance);
      check_against(fused, seq, net, kStepTolerance);
    }
  }
}

// The seed model's whole-model op (conv_relu_pool_fc_softmax) against the layer ops it replaces:
// the fused conv_relu_pool reading the data set, then fc and the loss; and every layer on its own.
BOOST_AUTO_TEST_CASE(layer_ops_match_fused_seed_op) {
  for (int channels : {1, 3}) {
    cnn::SeedModel m;
    m.input = {channels, 28, 28};
    m.kernel = 3;
    m.filters = 32;
    m.classes = 10;
    const cnn::Network net = cnn::seed_network(m);
    const RandomData data = random_data(net.input, 400, 100, 53);
    const Run fused = train("cuda", net, data, cnn::OptimizerKind::kMomentum, 3, 100);
    const Run layers = train("cuda", net, data, cnn::OptimizerKind::kMomentum, 3, 100, true, seed_layer_ops(net));
    const Run unfused = train("cuda", net, data, cnn::OptimizerKind::kMomentum, 3, 100, true, unfused_ops(net));
    const Run seq = train("seq", net, data, cnn::OptimizerKind::kMomentum, 3, 100);
    BOOST_TEST_CONTEXT("seed, " << channels << " channel(s)") {
      std::printf("seed model, %d channel(s): %s and %s vs %s\n", channels, layers.description.c_str(),
                  unfused.description.c_str(), fused.description.c_str());
      BOOST_TEST(fused.description.find("ops conv_relu_pool_fc_softmax,") != std::string::npos, fused.description);
      BOOST_TEST(layers.description.find("ops conv_relu_pool fc softmax_cross_entropy,") != std::string::npos,
                 layers.description);
      BOOST_TEST(unfused.description.find("ops conv relu maxpool fc softmax_cross_entropy,") != std::string::npos,
                 unfused.description);
      check_against(layers, fused, net, kStepTolerance);
      check_against(unfused, fused, net, kStepTolerance);
      check_against(fused, seq, net, kStepTolerance);
    }
  }
}

// The last fc layer and the loss in one kernel (fc_softmax) against the fc op and the loss op on
// their own, both on the GPU: every gradient and parameter after three Adam steps, the loss and hit
// sums, the evaluation and the logits (check_against). With an earlier layer (a ReLU's output: the
// input gradient masked) and label smoothing, after a layer with no ReLU (nothing masked), alone (no
// input gradient), and at the most inputs it takes.
BOOST_AUTO_TEST_CASE(fused_head_matches_the_fc_and_loss_ops) {
  struct Case {
    const char* spec;
    cnn::TensorShape input;
    float label_smoothing;
    const char* cuda_ops;
  };
  const Case cases[] = {
      {"conv3x3:8 relu fc:48 relu fc:10", {3, 12, 12}, 0.0f, "conv+relu fc+relu fc_softmax"},
      {"conv3x3:8 relu fc:48 relu fc:10", {3, 12, 12}, 0.1f, "conv+relu fc+relu fc_softmax"},
      {"conv3x3:6 fc:10", {1, 11, 11}, 0.0f, "conv fc_softmax"},
      {"fc:10", {1, 28, 28}, 0.0f, "fc_softmax"},
      {"conv3x3:4/p1 relu fc:10", {1, 32, 32}, 0.0f, "conv+relu fc_softmax"},  // 4096 inputs
  };
  std::uint32_t seed = 120;
  for (const Case& c : cases) {
    const cnn::Network net = cnn::build_network(c.spec, 0, c.input, 10);
    const std::vector<cnn::Op> fused = cnn::plan_ops(net, cnn::FusionTarget::kCuda);
    BOOST_TEST_REQUIRE(cnn::describe_ops(fused) == c.cuda_ops);
    // The same plan with the head as two ops: the fc layer alone, then the loss.
    std::vector<cnn::Op> split = fused;
    split.back().kind = cnn::OpKind::kLayer;
    split.back().layer = cnn::LayerKind::kFc;
    split.back().last_layer = split.back().first_layer;
    cnn::Op loss;
    loss.kind = cnn::OpKind::kSoftmaxCrossEntropy;
    loss.first_layer = loss.last_layer = net.layers.size();
    loss.needs_input_grad = true;
    split.push_back(loss);
    const RandomData data = random_data(net.input, 300, 70, seed++);
    Regime regime;
    regime.label_smoothing = c.label_smoothing;
    BOOST_TEST_CONTEXT(c.spec << ", label smoothing " << c.label_smoothing) {
      const Run one = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 100, true, fused, regime);
      const Run two = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 100, true, split, regime);
      std::printf("%s, smoothing %.1f: %s vs %s\n", net.describe().c_str(), c.label_smoothing,
                  one.description.c_str(), two.description.c_str());
      BOOST_TEST(one.description.find(ops_text(fused)) != std::string::npos, one.description);
      BOOST_TEST(two.description.find(ops_text(split)) != std::string::npos, two.description);
      check_against(one, two, net, kStepTolerance);
    }
  }
}

}  // namespace
