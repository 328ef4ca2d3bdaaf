// The network architecture and the flat parameter layout it implies.
//
// Every parameter lives in one contiguous float array (ParamLayout gives each a named view), so the
// gradient allreduce, the optimizer update and the checkpoint writer each walk one buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnn {

struct TensorShape {
  int channels = 0;
  int height = 0;
  int width = 0;
  std::int64_t size() const { return static_cast<std::int64_t>(channels) * height * width; }
};

// One named parameter tensor inside the flat buffer, e.g. "conv1.weight" [d,1,3,3].
struct ParamView {
  std::string layer;                 // "conv1"
  std::string param;                 // "weight"
  std::vector<std::int64_t> shape;   // natural shape, as in PyTorch
  std::int64_t offset = 0;           // in floats, from the start of the buffer
  std::int64_t size = 0;             // product of shape
  std::int64_t fan_in = 0;           // inputs feeding one output; sets the init bound
  // Not drawn: every element starts at this value (a bn layer's scale 1 and shift 0).
  bool constant_init = false;
  float init_value = 0.0f;

  std::string name() const { return layer + "." + param; }
};

class ParamLayout {
 public:
  // Appends a view at the end of the buffer and returns its offset.
  std::int64_t add(const std::string& layer, const std::string& param,
                   std::vector<std::int64_t> shape, std::int64_t fan_in);
  // Appends a view whose elements all start at `value` (no draw).
  std::int64_t add_constant(const std::string& layer, const std::string& param,
                            std::vector<std::int64_t> shape, float value);
  const std::vector<ParamView>& views() const { return views_; }
  const ParamView& find(const std::string& name) const;  // throws std::out_of_range
  std::int64_t total() const { return total_; }

 private:
  std::vector<ParamView> views_;
  std::int64_t total_ = 0;
};

// The seed CNN of the original study, the shape the fused fast paths (ops.hpp, kernels/) serve;
// general networks are cnn::Network (network.hpp), whose as_seed() gives this when it fits:
//   input C x H x W -> conv KxK, `filters` maps, stride 1, no padding -> ReLU -> maxpool 2x2/2
//   -> flatten -> fully connected -> `classes` logits -> softmax cross-entropy.
struct SeedModel {
  TensorShape input;                 // 1 x 28 x 28 for (Fashion-)MNIST
  int kernel = 3;
  int filters = 0;
  int classes = 10;

  TensorShape conv() const { return {filters, input.height - kernel + 1, input.width - kernel + 1}; }
  TensorShape pooled() const { return {filters, conv().height / 2, conv().width / 2}; }
  std::int64_t fc_inputs() const { return pooled().size(); }

  // conv1.weight [F,C,K,K], conv1.bias [F], fc.weight [classes, F*PH*PW], fc.bias [classes].
  ParamLayout layout() const;

  // Multiply-adds x2 of one image's forward and backward pass (the arithmetic floor's numerator).
  double flops_per_image() const;
  // "seed(d=32, 1x28x28 -> 10)"
  std::string describe() const;
};

// Seeded initialisation, the same on every rank: each tensor uniform in +-1/sqrt(fan_in), as
// PyTorch's default for Conv2d and Linear. Writes layout.total() floats.
void initialize_params(float* params, const ParamLayout& layout, std::uint64_t seed);

}  // namespace cnn
