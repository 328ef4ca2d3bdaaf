// The network as a backend runs it: a list of ops, each running one or more consecutive layers of
// the network (network.hpp). The builder picks fused ops by pattern wherever the target has them and
// they are valid, so one backend per device runs every network, and the seed model's fast path is
// the fused ops it matches rather than a backend of its own.
//
//   target      fuses
//   reference   nothing: `seq` runs layer by layer, the readable reference every fused op is tested against
//   cpu         conv KxK/s1/p0 + relu + maxpool2/2 -> conv_relu_pool (before the first parameters, not in a block)
//   cuda        a ReLU after a conv or fc folds into that layer's store (conv+relu, fc+relu);
//               conv3x3 + relu + maxpool2 -> conv_relu_pool (1 or 3 channels, before the first parameters;
//               as the first op it reads the uint8 samples itself);
//               the whole seed model, conv3x3 + relu + maxpool2 + fc:10 + softmax cross-entropy ->
//               conv_relu_pool_fc_softmax: the fused forward that adds the fc layer's partial logits
//               as it pools, the fc+softmax head, and the backward sweep that computes the fc and
//               conv weight gradients in one pass;
//               the last fc layer (10 outputs, no ReLU, at most kCudaFcSoftmaxMaxInputs inputs) +
//               softmax cross-entropy -> fc_softmax: logits, loss, their gradient and the fc layer's
//               input gradient in one kernel a step (its weight gradient stays a planned product)
//
// conv_relu_pool computes no input gradient, so it can stand only where no earlier op has parameters.
// A block (res[...]) is one op whose body and shortcut are plans of their own, fused by the same rules.
// Every network ends with softmax cross-entropy over its last fc layer: the last op is
// softmax_cross_entropy, unless a fused op took it in (conv_relu_pool_fc_softmax, fc_softmax).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cnn/network.hpp"

namespace cnn {

enum class OpKind {
  kLayer,                  // one layer of the registry (layers.def) as its own op: Op::layer says which
  kSoftmaxCrossEntropy,    // the loss over the last fc layer's logits (no network layer of its own)
  kConvReluPool,           // conv + relu + maxpool: pooled values and their argmax, no conv output
  kConvReluPoolFcSoftmax,  // the whole seed model and its loss, on the GPU
  kFcSoftmax,              // the last fc layer and the loss, on the GPU
};

enum class FusionTarget { kReference, kCpu, kCuda };

struct Op {
  OpKind kind = OpKind::kLayer;
  LayerKind layer = LayerKind::kRelu;  // kLayer: the kind of layers[first_layer]
  // The network layers it runs: layers[first_layer .. last_layer], flatten layers included (they
  // are no op in NCHW). The loss op has first_layer == last_layer == layers.size().
  std::size_t first_layer = 0;
  std::size_t last_layer = 0;
  bool relu_after = false;        // kConv, kFc: the ReLU layer after it is folded into its output
  bool needs_input_grad = false;  // an earlier op has parameters, so this one must pass a gradient back
  bool reads_data = false;        // the first op reads the uint8 samples through the batch's indices
  bool has_params = false;        // it computes weight gradients
  // A composite layer's op (a block, Layer::body): the plans of its body and its shortcut (empty for
  // the identity), over block_network(network, block, block.body / block.shortcut), for the same
  // target. Their first ops pass a gradient back when this op does; the others always do.
  std::vector<Op> body;
  std::vector<Op> shortcut;

  // "conv", "conv+relu", "maxpool", "res[conv+relu conv]", "conv_relu_pool", "conv_relu_pool_fc_softmax",
  // "fc_softmax", ...
  std::string name() const;
};

// The ops of `network` for `target`, in forward order. gathered_input: every training batch must pass
// through the gather (--augment applies there, augment.hpp), so no op may read the uint8 data set
// itself: on the GPU the whole-seed-model fusion and a first conv_relu_pool's own reads give way.
std::vector<Op> plan_ops(const Network& network, FusionTarget target, bool gathered_input = false);

// The ops' names, space-separated: "conv_relu_pool fc softmax_cross_entropy" (start-up line, tests).
std::string describe_ops(const std::vector<Op>& ops);

// The network layers with parameters (conv, fc) that op runs, in forward order.
std::vector<const Layer*> param_layers(const Network& network, const Op& op);

// The CUDA kernels of the fused conv + relu + pool ops are compiled for these shapes
// (kernels/ops/seed_shape.hpp): a 3x3 kernel, 1 or 3 input channels, 10 classes.
bool cuda_conv_relu_pool_supported(const SeedModel& shape);
// The fc_softmax kernel (kernels/ops/fc_softmax.cu) takes an fc layer of 10 outputs (the classes) and
// up to this many inputs: a warp per sample reads the 10 x I weights from L1 for every sample, which
// pays while they stay there (40 KiB at 1024 inputs; the cifar preset's last layer has 64).
constexpr std::int64_t kCudaFcSoftmaxMaxInputs = 4096;
bool cuda_fc_softmax_supported(const Layer& fc, int classes);

}  // namespace cnn
