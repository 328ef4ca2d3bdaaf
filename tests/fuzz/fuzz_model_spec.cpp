// --model SPEC (src/model/network.cpp, build_network): the layer grammar and the shape checks behind it.
// The first byte picks the input shape, so strides, padding and pools meet small and odd inputs too.
#include <string>

#include "cnn/network.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const cnn::TensorShape kInputs[] = {{1, 28, 28}, {3, 32, 32}, {1, 5, 7}, {2, 1, 1}};
  const cnn::TensorShape input = kInputs[data[0] % 4];
  const std::string spec(reinterpret_cast<const char*>(data + 1), size - 1);
  cnn::fuzz::expect_clean([&] {
    const cnn::Network net = cnn::build_network(spec, 8, input, 10);
    // An accepted network must be what the backends rely on: every shape positive, the last layer
    // 10 outputs wide, and a parameter layout covering exactly the layers' weights and biases: a
    // weight and a bias for each layer with parameters, a residual block's inner layers counted
    // one by one (its body and its shortcut).
    std::int64_t params = 0;
    for (const cnn::Layer& layer : net.layers) {
      if (layer.out.size() <= 0) std::abort();
      if (layer.body.empty()) {
        if (layer.has_params()) params += 1;
        continue;
      }
      for (const auto* branch : {&layer.body, &layer.shortcut})
        for (const cnn::Layer& inner : *branch) {
          if (inner.out.size() <= 0) std::abort();
          if (inner.has_params()) params += 1;
        }
    }
    if (net.layers.empty() || net.layers.back().out.size() != 10) std::abort();
    if (net.layout.total() <= 0 || static_cast<std::int64_t>(net.layout.views().size()) != 2 * params) std::abort();
  });
  return 0;
}
