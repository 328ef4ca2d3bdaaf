// Softmax cross-entropy with integer labels. The max is subtracted before exp() so that large
// logits cannot overflow; the loss is accumulated in double.
#include <cmath>

#include "cnn/ops.hpp"

namespace cnn {

void softmax_cross_entropy(float* grad_logits, double* loss_sum, std::int64_t* correct, const float* logits,
                           const std::uint8_t* labels, std::int64_t n, int classes) {
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
    total += static_cast<double>(std::log(denominator) - (z[label] - top));
    hits += (best == label) ? 1 : 0;
    if (grad_logits != nullptr) {
      float* g = grad_logits + s * classes;
      for (int k = 0; k < classes; ++k) g[k] = std::exp(z[k] - top) / denominator - (k == label ? 1.0f : 0.0f);
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
