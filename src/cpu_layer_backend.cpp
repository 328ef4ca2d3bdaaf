// The CPU backend of any network (--model SPEC): the ops of layer_ops.hpp and ops.hpp, one layer after
// another, over micro-batches so activation memory stays bounded (kCpuMicroBatch samples per thread).
// Threading, reductions and the optimizer are shared with the fused seed backend (cpu_backend_base.hpp).
#include <string>
#include <utility>
#include <vector>

#include "cnn/cpu_backend.hpp"
#include "cnn/layer_ops.hpp"
#include "cnn/ops.hpp"
#include "cpu_backend_base.hpp"

namespace cnn {

namespace {

// Activations of one micro-batch, per thread.
struct LayerScratch {
  std::vector<float> input;                      // [mb, C, H, W]
  std::vector<std::uint8_t> labels;              // [mb]
  std::vector<std::vector<float>> outputs;       // per layer [mb, out]; empty for flatten (a view)
  std::vector<std::vector<std::int32_t>> argmax; // per maxpool layer [mb, out]
  std::vector<float> grad_a, grad_b;             // ping-pong activation gradients [mb, largest]

  explicit LayerScratch(const Network& net)
      : input(static_cast<std::size_t>(kCpuMicroBatch * net.input.size())),
        labels(kCpuMicroBatch),
        outputs(net.layers.size()),
        argmax(net.layers.size()),
        grad_a(static_cast<std::size_t>(kCpuMicroBatch * net.largest_activation())),
        grad_b(grad_a.size()) {
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
      const Layer& layer = net.layers[i];
      const auto size = static_cast<std::size_t>(kCpuMicroBatch * layer.out.size());
      if (layer.kind != LayerKind::kFlatten) outputs[i].resize(size);
      if (layer.kind == LayerKind::kMaxPool) argmax[i].resize(size);
    }
  }
};

class CpuLayerBackend final : public CpuBackendBase {
 public:
  CpuLayerBackend(const Network& network, std::string kind, int threads, OptimizerKind optimizer)
      : CpuBackendBase(std::move(kind), threads, network.layout, optimizer), net_(network) {
    for (int t = 0; t < this->threads(); ++t) scratch_.emplace_back(net_);
    // Layers before the first one with parameters need no gradient.
    first_param_layer_ = 0;
    while (!net_.layers[first_param_layer_].has_params()) ++first_param_layer_;
  }

 private:
  // The input of layer i (a flatten passes its input on unchanged).
  const float* input_of(const LayerScratch& sc, std::size_t i) const {
    return i == 0 ? sc.input.data() : output_of(sc, i - 1);
  }
  const float* output_of(const LayerScratch& sc, std::size_t i) const {
    return net_.layers[i].kind == LayerKind::kFlatten ? input_of(sc, i) : sc.outputs[i].data();
  }

  // Gathers data[indices[0..mb)] and runs every layer; the logits end in the last layer's output.
  void forward(const Dataset& data, const std::int32_t* indices, std::int64_t mb, LayerScratch& sc, double* gathered) {
    gather_normalize(sc.input.data(), data.images.data(), indices, mb, net_.input.size());
    gather_labels(sc.labels.data(), data.labels.data(), indices, mb);
    if (gathered != nullptr) *gathered = wall_seconds();
    const float* p = param_data();
    for (std::size_t i = 0; i < net_.layers.size(); ++i) {
      const Layer& layer = net_.layers[i];
      const float* in = input_of(sc, i);
      float* out = sc.outputs[i].data();
      switch (layer.kind) {
        case LayerKind::kConv:
          conv2d_forward(out, in, p + layer.weight_offset, p + layer.bias_offset, mb, layer.conv);
          break;
        case LayerKind::kRelu:
          relu_forward(out, in, mb * layer.out.size());
          break;
        case LayerKind::kMaxPool:
          maxpool_forward(out, sc.argmax[i].data(), in, mb, layer.pool);
          break;
        case LayerKind::kFlatten:
          break;
        case LayerKind::kFc:
          fc_forward(out, in, p + layer.weight_offset, p + layer.bias_offset, mb, layer.in.size(), layer.fc_out);
          break;
      }
    }
  }

  const float* logits(const LayerScratch& sc) const { return output_of(sc, net_.layers.size() - 1); }

  void evaluate_micro_batch(const std::int32_t* indices, std::int64_t mb, int t, BatchStats& stats) override {
    LayerScratch& sc = scratch_[static_cast<std::size_t>(t)];
    forward(test_data(), indices, mb, sc, nullptr);
    softmax_cross_entropy(nullptr, &stats.loss_sum, &stats.correct, logits(sc), sc.labels.data(), mb, net_.classes);
    stats.count += mb;
  }

  void train_micro_batch(const std::int32_t* indices, std::int64_t mb, float* g, int t, BatchStats& stats,
                         ThreadTimes& times) override {
    LayerScratch& sc = scratch_[static_cast<std::size_t>(t)];
    const double t0 = wall_seconds();
    double t1 = t0;
    forward(train_data(), indices, mb, sc, &t1);
    float* grad_out = sc.grad_a.data();
    float* spare = sc.grad_b.data();
    softmax_cross_entropy(grad_out, &stats.loss_sum, &stats.correct, logits(sc), sc.labels.data(), mb, net_.classes);
    stats.count += mb;
    const double t2 = wall_seconds();

    const float* p = param_data();
    for (std::size_t i = net_.layers.size(); i-- > first_param_layer_;) {
      const Layer& layer = net_.layers[i];
      const float* in = input_of(sc, i);
      float* grad_in = i > first_param_layer_ ? spare : nullptr;
      switch (layer.kind) {
        case LayerKind::kConv:
          conv2d_backward(grad_in, g + layer.weight_offset, g + layer.bias_offset, grad_out, in, p + layer.weight_offset,
                          mb, layer.conv);
          break;
        case LayerKind::kRelu:
          relu_backward(grad_out, grad_out, sc.outputs[i].data(), mb * layer.out.size());  // in place
          grad_in = nullptr;
          break;
        case LayerKind::kMaxPool:
          maxpool_backward(grad_in, grad_out, sc.argmax[i].data(), mb, layer.pool);
          break;
        case LayerKind::kFlatten:
          grad_in = nullptr;  // same memory, same order
          break;
        case LayerKind::kFc:
          fc_backward(grad_in, g + layer.weight_offset, g + layer.bias_offset, grad_out, in, p + layer.weight_offset, mb,
                      layer.in.size(), layer.fc_out);
          break;
      }
      if (grad_in != nullptr) std::swap(grad_out, spare);
    }
    const double t3 = wall_seconds();
    times.data += t1 - t0;
    times.forward += t2 - t1;
    times.backward += t3 - t2;
  }

  Network net_;
  std::size_t first_param_layer_ = 0;
  std::vector<LayerScratch> scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_layer_backend(const Network& network, const std::string& kind, int threads,
                                                OptimizerKind optimizer) {
  return std::make_unique<CpuLayerBackend>(network, kind, kind == "seq" ? 1 : threads, optimizer);
}

}  // namespace cnn
