// The builder of op_plan.hpp: walks the layers once, trying the fused patterns of the target at each
// position before falling back to the layer's own op.
#include "cnn/op_plan.hpp"

#include <optional>

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

OpKind layer_op(LayerKind kind) {
  switch (kind) {
    case LayerKind::kConv: return OpKind::kConv;
    case LayerKind::kRelu: return OpKind::kRelu;
    case LayerKind::kMaxPool: return OpKind::kMaxPool;
    case LayerKind::kFc: return OpKind::kFc;
    case LayerKind::kFlatten: break;
  }
  return OpKind::kRelu;  // not reached: flattens are skipped
}

}  // namespace

bool cuda_conv_relu_pool_supported(const SeedModel& m) {
  return m.kernel == 3 && (m.input.channels == 1 || m.input.channels == 3) && m.classes == 10 && m.filters > 0 &&
         m.pooled().height > 0 && m.pooled().width > 0;
}

bool Op::has_params() const {
  return kind == OpKind::kConv || kind == OpKind::kFc || kind == OpKind::kConvReluPool ||
         kind == OpKind::kConvReluPoolFcSoftmax;
}

std::string Op::name() const {
  switch (kind) {
    case OpKind::kConv: return relu_after ? "conv+relu" : "conv";
    case OpKind::kRelu: return "relu";
    case OpKind::kMaxPool: return "maxpool";
    case OpKind::kFc: return relu_after ? "fc+relu" : "fc";
    case OpKind::kSoftmaxCrossEntropy: return "softmax_cross_entropy";
    case OpKind::kConvReluPool: return "conv_relu_pool";
    case OpKind::kConvReluPoolFcSoftmax: return "conv_relu_pool_fc_softmax";
  }
  return "?";
}

std::vector<Op> plan_ops(const Network& net, FusionTarget target) {
  std::vector<Op> ops;
  const std::size_t count = net.layers.size();
  bool params_before = false;
  auto push = [&](Op op) {
    op.needs_input_grad = params_before;
    op.reads_data = ops.empty() && target == FusionTarget::kCuda &&
                    (op.kind == OpKind::kConvReluPool || op.kind == OpKind::kConvReluPoolFcSoftmax);
    params_before |= op.has_params();
    ops.push_back(op);
  };

  // The whole seed model, on the GPU: one fused op, the loss included.
  if (target == FusionTarget::kCuda) {
    if (const std::optional<SeedModel> seed = net.as_seed(); seed && cuda_conv_relu_pool_supported(*seed)) {
      Op op;
      op.kind = OpKind::kConvReluPoolFcSoftmax;
      op.first_layer = 0;
      op.last_layer = count;  // the loss too
      push(op);
      return ops;
    }
  }

  for (std::size_t i = skip_flatten(net, 0); i < count; i = skip_flatten(net, i + 1)) {
    const Layer& layer = net.layers[i];
    SeedModel shape;
    if (target != FusionTarget::kReference && !params_before) {
      if (const std::optional<std::size_t> pool = conv_relu_pool_at(net, i, &shape);
          pool && (target == FusionTarget::kCpu || cuda_conv_relu_pool_supported(shape))) {
        Op op;
        op.kind = OpKind::kConvReluPool;
        op.first_layer = i;
        op.last_layer = *pool;
        push(op);
        i = *pool;
        continue;
      }
    }
    if (target == FusionTarget::kCuda && layer.kind == LayerKind::kRelu && !ops.empty() && !ops.back().relu_after &&
        (ops.back().kind == OpKind::kConv || ops.back().kind == OpKind::kFc)) {
      ops.back().relu_after = true;
      ops.back().last_layer = i;
      continue;
    }
    Op op;
    op.kind = layer_op(layer.kind);
    op.first_layer = i;
    op.last_layer = i;
    push(op);
  }
  Op loss;
  loss.kind = OpKind::kSoftmaxCrossEntropy;
  loss.first_layer = count;
  loss.last_layer = count;
  push(loss);
  return ops;
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
