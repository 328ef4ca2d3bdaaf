// The layer operations of the seed CNN on the CPU, over a batch of n samples in NCHW layout.
// Each has a CUDA twin in kernels/ with the same name and argument order (in namespace cnn::cuda),
// taking device pointers. Backward functions ACCUMULATE (+=) into parameter gradients, so a caller
// can sum per-sample gradients over several calls; they OVERWRITE activation gradients.
#pragma once

#include <cstdint>

#include "cnn/augment.hpp"
#include "cnn/model.hpp"

namespace cnn {

// out[s] = in_images[indices[s]] / 255, as float. sample_size = C*H*W.
void gather_normalize(float* out /*[n, sample_size]*/, const std::uint8_t* images /*[N, sample_size]*/,
                      const std::int32_t* indices /*[n]*/, std::int64_t n, std::int64_t sample_size);
// gather_normalize with --augment (augment.hpp) applied to each sample as it is gathered: sample s
// is drawn with (origin.step_key, origin.first_sample + s), its index in the global batch. shape is
// one image's [C, H, W]; pixels of the zero padding are 0. A training batch's gather only.
void gather_augment(float* out /*[n, C*H*W]*/, const std::uint8_t* images /*[N, C*H*W]*/,
                    const std::int32_t* indices /*[n]*/, std::int64_t n, const TensorShape& shape,
                    const Augment& augment, const MaskOrigin& origin);
// labels_out[s] = labels[indices[s]].
void gather_labels(std::uint8_t* labels_out /*[n]*/, const std::uint8_t* labels /*[N]*/,
                   const std::int32_t* indices /*[n]*/, std::int64_t n);

// Fused convolution (KxK, stride 1, no padding) + bias + ReLU + 2x2/2 max-pool.
//   conv[s,f,y,x] = bias[f] + sum_{c,i,j} weight[f,c,i,j] * in[s,c,y+i,x+j]
//   pooled[s,f,py,px] = max(0, max_{a,b in {0,1}} conv[s,f,2py+a,2px+b])
// argmax keeps which of the four won (a*2+b, first maximum in that order), so backward needs no
// search and no atomics.
void conv_relu_pool_forward(float* pooled /*[n,F,PH,PW]*/, std::uint8_t* argmax /*[n,F,PH,PW]*/,
                            const float* in /*[n,C,H,W]*/, const float* weight /*[F,C,K,K]*/,
                            const float* bias /*[F]*/, std::int64_t n, const SeedModel& m);

// Gradients of the fused layer, taken only at the pool winners whose value passed the ReLU:
//   dL/dconv[s,f,y,x] = grad_pooled[s,f,py,px] if (y,x) won pool cell (py,px) and pooled > 0, else 0
//   grad_weight[f,c,i,j] += sum_{s,y,x} dL/dconv[s,f,y,x] * in[s,c,y+i,x+j]
//   grad_bias[f]        += sum_{s,y,x} dL/dconv[s,f,y,x]
// (The seed conv is the first layer, so no input gradient is needed.)
void conv_relu_pool_backward(float* grad_weight /*[F,C,K,K]*/, float* grad_bias /*[F]*/,
                             const float* grad_pooled /*[n,F,PH,PW]*/, const float* pooled /*[n,F,PH,PW]*/,
                             const std::uint8_t* argmax /*[n,F,PH,PW]*/, const float* in /*[n,C,H,W]*/,
                             std::int64_t n, const SeedModel& m);

// Fully connected: out[s,o] = bias[o] + sum_i weight[o,i] * in[s,i].
void fc_forward(float* out /*[n,O]*/, const float* in /*[n,I]*/, const float* weight /*[O,I]*/,
                const float* bias /*[O]*/, std::int64_t n, std::int64_t in_features, std::int64_t out_features);

//   grad_in[s,i]      = sum_o grad_out[s,o] * weight[o,i]          (skipped when grad_in is null)
//   grad_weight[o,i] += sum_s grad_out[s,o] * in[s,i]
//   grad_bias[o]     += sum_s grad_out[s,o]
void fc_backward(float* grad_in /*[n,I] or null*/, float* grad_weight /*[O,I]*/, float* grad_bias /*[O]*/,
                 const float* grad_out /*[n,O]*/, const float* in /*[n,I]*/, const float* weight /*[O,I]*/,
                 std::int64_t n, std::int64_t in_features, std::int64_t out_features);

// Softmax cross-entropy with integer labels and label smoothing S (torch.nn.CrossEntropyLoss(
// label_smoothing=S)): the target of sample s is q_k = (1 - S) [k == y] + S / K, and
//   loss_s = log(sum_k exp(z_k)) - (1 - S) z_y - (S / K) sum_k z_k ,  dloss_s/dz_k = softmax(z)_k - q_k
// (with S = 0: log(sum_k exp(z_k)) - z_y and softmax(z)_k - [k == y], the very arithmetic of S = 0
// before smoothing existed). Adds the loss sum to *loss_sum and the number of argmax(z) == y to
// *correct. grad_logits may be null (evaluation, which the callers run with S = 0).
void softmax_cross_entropy(float* grad_logits /*[n,K] or null*/, double* loss_sum, std::int64_t* correct,
                           const float* logits /*[n,K]*/, const std::uint8_t* labels /*[n]*/,
                           std::int64_t n, int classes, float label_smoothing);

// One sample's class probabilities softmax(z), in double with the largest logit subtracted first, and
// the predicted class: the index of the largest logit, the first of equal ones, as softmax_cross_entropy
// counts a hit (so the predictions' accuracy is the evaluation's).
int softmax_probabilities(const float* logits /*[K]*/, int classes, double* probabilities /*[K]*/);

}  // namespace cnn
