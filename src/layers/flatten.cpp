// The flatten layer: its registry entry (flatten_layer, layers.def). C x H x W -> C*H*W features is
// free in NCHW, so it has no op on any device (CNN_VIEW_LAYER).
#include "cnn/layer_registry.hpp"

#include <string>

namespace cnn {

namespace {

std::string resolve_flatten(const LayerToken&, Layer& layer) {
  layer.out = {static_cast<int>(layer.in.size()), 1, 1};
  return "";
}

std::string canonical_flatten(const Layer&) { return ""; }

}  // namespace

const LayerDef flatten_layer = {LayerKind::kFlatten, false, "flatten", "flatten", "flatten", nullptr, LayerInput::kFlatOnce,
                                 resolve_flatten, canonical_flatten, nullptr, false, nullptr, nullptr};

}  // namespace cnn
