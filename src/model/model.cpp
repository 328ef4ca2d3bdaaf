#include "cnn/model.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "cnn/rng.hpp"

namespace cnn {

std::int64_t ParamLayout::add(const std::string& layer, const std::string& param, std::vector<std::int64_t> shape,
                              std::int64_t fan_in) {
  ParamView view;
  view.layer = layer;
  view.param = param;
  view.size = 1;
  for (std::int64_t extent : shape) view.size *= extent;
  view.shape = std::move(shape);
  view.offset = total_;
  view.fan_in = fan_in;
  total_ += view.size;
  views_.push_back(std::move(view));
  return views_.back().offset;
}

std::int64_t ParamLayout::add_constant(const std::string& layer, const std::string& param,
                                       std::vector<std::int64_t> shape, float value) {
  const std::int64_t offset = add(layer, param, std::move(shape), 1);
  views_.back().constant_init = true;
  views_.back().init_value = value;
  return offset;
}

const ParamView& ParamLayout::find(const std::string& name) const {
  for (const ParamView& view : views_)
    if (view.name() == name) return view;
  throw std::out_of_range("no parameter named " + name);
}

ParamLayout SeedModel::layout() const {
  ParamLayout layout;
  const std::int64_t conv_fan_in = static_cast<std::int64_t>(input.channels) * kernel * kernel;
  layout.add("conv1", "weight", {filters, input.channels, kernel, kernel}, conv_fan_in);
  layout.add("conv1", "bias", {filters}, conv_fan_in);
  layout.add("fc", "weight", {classes, fc_inputs()}, fc_inputs());
  layout.add("fc", "bias", {classes}, fc_inputs());
  return layout;
}

double SeedModel::flops_per_image() const {
  const double conv_macs = static_cast<double>(conv().size()) * input.channels * kernel * kernel;
  const double fc_macs = static_cast<double>(fc_inputs()) * classes;
  // Pool-winner weight gradient: one KxK window per pooled output.
  const double conv_grad_macs = static_cast<double>(pooled().size()) * input.channels * kernel * kernel;
  // forward conv + forward fc + fc weight grad + fc input grad + conv weight grad; 2 FLOP per MAC.
  return 2.0 * (conv_macs + 3.0 * fc_macs + conv_grad_macs);
}

std::string SeedModel::describe() const {
  std::ostringstream text;
  text << "seed(conv" << kernel << "x" << kernel << ":" << filters << " relu maxpool2 fc:" << classes << ", input "
       << input.channels << "x" << input.height << "x" << input.width << ")";
  return text.str();
}

void initialize_params(float* params, const ParamLayout& layout, std::uint64_t seed) {
  for (std::size_t v = 0; v < layout.views().size(); ++v) {
    const ParamView& view = layout.views()[v];
    // One stream per tensor, so adding a layer never shifts the draws of the others.
    const std::uint64_t key = stream_key(seed, Stream::kInit, v);
    if (view.constant_init) {
      std::fill(params + view.offset, params + view.offset + view.size, view.init_value);
      continue;
    }
    const float bound = 1.0f / std::sqrt(static_cast<float>(view.fan_in));
    for (std::int64_t i = 0; i < view.size; ++i)
      params[view.offset + i] = (2.0f * draw_unit_float(key, static_cast<std::uint64_t>(i)) - 1.0f) * bound;
  }
}

}  // namespace cnn
