// Softmax cross-entropy with integer labels. The max is subtracted before exp() so that large
// logits cannot overflow; the loss is accumulated in double. Label smoothing: include/cnn/ops.hpp.
#include <cmath>

#include "cnn/ops.hpp"

namespace cnn {

void softmax_cross_entropy(float* grad_logits, double* loss_sum, std::int64_t* correct, const float* logits,
                           const std::uint8_t* labels, std::int64_t n, int classes, float label_smoothing) {
  // q_k = (1 - S) [k == y] + S / K; the shifts by `top` below cancel in the loss since sum_k q_k = 1.
  const float off_target = label_smoothing / static_cast<float>(classes);
  const float on_target = 1.0f - label_smoothing + off_target;
  double total = 0.0;
  std::int64_t hits = 0;
  for (std::int64_t s = 0; s < n; ++s) {
    const float* z = logits + s * classes;
    int best = 0;
    for (int k = 1; k < classes; ++k)
      if (z[k] > z[best]) best = k;
    const float top = z[best];
    float denominator = 0.0f;
    for (int k = 0; k < classes; ++k) denominator += std::exp(z[k] - top);
    const int label = labels[s];
    if (label_smoothing == 0.0f) {
      total += static_cast<double>(std::log(denominator) - (z[label] - top));
    } else {
      float shifted_sum = 0.0f;
      for (int k = 0; k < classes; ++k) shifted_sum += z[k] - top;
      total += static_cast<double>(std::log(denominator) - (1.0f - label_smoothing) * (z[label] - top) -
                                   off_target * shifted_sum);
    }
    hits += (best == label) ? 1 : 0;
    if (grad_logits != nullptr) {
      float* g = grad_logits + s * classes;
      for (int k = 0; k < classes; ++k)
        g[k] = std::exp(z[k] - top) / denominator - (k == label ? on_target : off_target);
    }
  }
  *loss_sum += total;
  *correct += hits;
}

int softmax_probabilities(const float* logits, int classes, double* probabilities) {
  int best = 0;
  for (int k = 1; k < classes; ++k)
    if (logits[k] > logits[best]) best = k;
  const double top = logits[best];
  double denominator = 0.0;
  for (int k = 0; k < classes; ++k) {
    probabilities[k] = std::exp(static_cast<double>(logits[k]) - top);
    denominator += probabilities[k];
  }
  for (int k = 0; k < classes; ++k) probabilities[k] /= denominator;
  return best;
}

}  // namespace cnn
