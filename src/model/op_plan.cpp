// The builder of op_plan.hpp: walks the layers once, trying the fused patterns of the target at each
// position before falling back to the layer's own op.
#include "cnn/op_plan.hpp"

#include <optional>
#include <utility>

namespace cnn {

namespace {

// The next layer at or after i that is not a flatten (flatten is free in NCHW), or layers.size().
std::size_t skip_flatten(const Network& net, std::size_t i) {
  while (i < net.layers.size() && net.layers[i].kind == LayerKind::kFlatten) ++i;
  return i;
}

// conv KxK/s1/p0, relu, maxpool2/2 starting at layer i (flattens skipped): the index of the pool
// layer, and the pattern's shape as the fused op sees it.
std::optional<std::size_t> conv_relu_pool_at(const Network& net, std::size_t i, SeedModel* shape) {
  const std::size_t relu = skip_flatten(net, i + 1);
  const std::size_t pool = skip_flatten(net, relu + 1);
  if (pool >= net.layers.size()) return std::nullopt;
  const Layer& c = net.layers[i];
  const Layer& p = net.layers[pool];
  if (c.kind != LayerKind::kConv || net.layers[relu].kind != LayerKind::kRelu || p.kind != LayerKind::kMaxPool)
    return std::nullopt;
  if (c.conv.stride != 1 || c.conv.pad != 0 || p.pool.size != 2 || p.pool.stride != 2) return std::nullopt;
  shape->input = c.in;
  shape->kernel = c.conv.kernel;
  shape->filters = c.conv.filters;
  shape->classes = net.classes;
  return pool;
}

bool folds_relu(const Op& op) {
  return op.kind == OpKind::kLayer && !op.relu_after && op.body.empty() &&
         (op.layer == LayerKind::kConv || op.layer == LayerKind::kFc);
}

// The ops of net.layers (a whole network, or a block's layers as block_network), in forward order.
// params_before: a gradient must pass back out of the first op. in_block: the list is a block's, so
// the loss and the whole-model fusion are not its, and conv_relu_pool (no input gradient) stays out.
// gathered_input: every batch is gathered first (--augment), so no op reads the data set itself.
std::vector<Op> plan_list(const Network& net, FusionTarget target, bool params_before, bool in_block,
                          bool gathered_input) {
  std::vector<Op> ops;
  const std::size_t count = net.layers.size();
  auto push = [&](Op op) {
    op.needs_input_grad = params_before;
    op.reads_data = !in_block && !gathered_input && ops.empty() && target == FusionTarget::kCuda &&
                    (op.kind == OpKind::kConvReluPool || op.kind == OpKind::kConvReluPoolFcSoftmax);
    params_before |= op.has_params;
    ops.push_back(std::move(op));
  };

  // The whole seed model, on the GPU: one fused op, the loss included.
  if (target == FusionTarget::kCuda && !in_block && !gathered_input) {
    if (const std::optional<SeedModel> seed = net.as_seed(); seed && cuda_conv_relu_pool_supported(*seed)) {
      Op op;
      op.kind = OpKind::kConvReluPoolFcSoftmax;
      op.first_layer = 0;
      op.last_layer = count;  // the loss too
      op.has_params = true;
      push(op);
      return ops;
    }
  }

  for (std::size_t i = skip_flatten(net, 0); i < count; i = skip_flatten(net, i + 1)) {
    const Layer& layer = net.layers[i];
    SeedModel shape;
    if (target != FusionTarget::kReference && !params_before && !in_block) {
      if (const std::optional<std::size_t> pool = conv_relu_pool_at(net, i, &shape);
          pool && (target == FusionTarget::kCpu || cuda_conv_relu_pool_supported(shape))) {
        Op op;
        op.kind = OpKind::kConvReluPool;
        op.first_layer = i;
        op.last_layer = *pool;
        op.has_params = true;
        push(op);
        i = *pool;
        continue;
      }
    }
    if (target == FusionTarget::kCuda && layer.kind == LayerKind::kRelu && !ops.empty() && folds_relu(ops.back())) {
      ops.back().relu_after = true;
      ops.back().last_layer = i;
      continue;
    }
    Op op;
    op.kind = OpKind::kLayer;
    op.layer = layer.kind;
    op.first_layer = i;
    op.last_layer = i;
    op.has_params = layer.has_params();
    if (!layer.body.empty()) {
      op.body = plan_list(block_network(net, layer, layer.body), target, params_before, true, gathered_input);
      op.shortcut = plan_list(block_network(net, layer, layer.shortcut), target, params_before, true, gathered_input);
    }
    push(op);
  }
  if (in_block) return ops;
  // On the GPU the last fc layer takes the loss in, where its kernel does.
  if (target == FusionTarget::kCuda && !ops.empty() && ops.back().kind == OpKind::kLayer &&
      ops.back().layer == LayerKind::kFc && !ops.back().relu_after &&
      cuda_fc_softmax_supported(net.layers[ops.back().first_layer], net.classes)) {
    ops.back().kind = OpKind::kFcSoftmax;
    ops.back().last_layer = count;  // the loss too
    return ops;
  }
  Op loss;
  loss.kind = OpKind::kSoftmaxCrossEntropy;
  loss.first_layer = count;
  loss.last_layer = count;
  push(loss);
  return ops;
}

}  // namespace

bool cuda_conv_relu_pool_supported(const SeedModel& m) {
  return m.kernel == 3 && (m.input.channels == 1 || m.input.channels == 3) && m.classes == 10 && m.filters > 0 &&
         m.pooled().height > 0 && m.pooled().width > 0;
}

bool cuda_fc_softmax_supported(const Layer& fc, int classes) {
  return fc.kind == LayerKind::kFc && classes == 10 && fc.fc_out == classes && fc.in.size() > 0 &&
         fc.in.size() <= kCudaFcSoftmaxMaxInputs;
}

std::string Op::name() const {
  switch (kind) {
    case OpKind::kLayer:
      if (!body.empty())
        return "res[" + describe_ops(body) + (shortcut.empty() ? "" : " | " + describe_ops(shortcut)) + "]";
      return std::string(layer_kind_name(layer)) + (relu_after ? "+relu" : "");
    case OpKind::kSoftmaxCrossEntropy: return "softmax_cross_entropy";
    case OpKind::kConvReluPool: return "conv_relu_pool";
    case OpKind::kConvReluPoolFcSoftmax: return "conv_relu_pool_fc_softmax";
    case OpKind::kFcSoftmax: return "fc_softmax";
  }
  return "?";
}

std::vector<Op> plan_ops(const Network& net, FusionTarget target, bool gathered_input) {
  return plan_list(net, target, false, false, gathered_input);
}

std::string describe_ops(const std::vector<Op>& ops) {
  std::string text;
  for (const Op& op : ops) {
    if (!text.empty()) text += ' ';
    text += op.name();
  }
  return text;
}

std::vector<const Layer*> param_layers(const Network& net, const Op& op) {
  std::vector<const Layer*> found;
  for (std::size_t i = op.first_layer; i <= op.last_layer && i < net.layers.size(); ++i)
    if (net.layers[i].has_params()) found.push_back(&net.layers[i]);
  return found;
}

}  // namespace cnn
