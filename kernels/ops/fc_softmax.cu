// The last fc layer and the softmax cross-entropy after it in one kernel: the fc_softmax op's
// (kernels/cuda/op_fc_softmax.cu; layer_ops.hpp). For each sample: the logits z = W x + b, the loss
// and hit, dL/dz = softmax(z) - q, and the input gradient W^T dL/dz, zeroed where x <= 0 when x is a
// ReLU's output. That is the work of fc_forward, softmax_cross_entropy and fc_backward's input
// gradient, which ran as three launches on the step's main chain (an fc:10 over 64 inputs took 9, 3
// and 6 us under ncu at batch 128, nvidia-h100-x1; docs/PERFORMANCE.md) for about 1300 FMAs a sample.
// Where the op before it is a staged convolution (tf32, bf16; also an fc layer run as a 1x1 one), the
// input gradient goes straight into that conv's staged output gradient, as its staging would write
// it (one launch fewer).
//
// A warp per sample: lane l takes inputs l, l+32, ... in that order, the ten partial logits are added
// over the lanes by an xor butterfly (each lane adds the same two values at each level, so all end
// with the same bits), and every lane then runs the sample's softmax and writes the input gradient of
// its own inputs (or words). No atomics: a rerun repeats bit for bit. In fp32 (fma) in every
// precision: the tensor cores would round x and W to gain nothing on a product this small.
#include <algorithm>
#include <string>

#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "ops/layer_ops.hpp"
#include "ops/softmax_kernels.cuh"
#include "ops/staged_layout.cuh"

namespace cnn::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// Input i's gradient of the sample: sum_o dz[o] W[o, i], 0 where the ReLU before let nothing through.
__device__ __forceinline__ float input_gradient(const FcSoftmaxTensors& t, const float (&dz)[kSeedClasses],
                                                const float* __restrict__ x, int inputs, int i) {
  float g = 0.0f;
#pragma unroll
  for (int o = 0; o < kSeedClasses; ++o) g = fmaf(dz[o], __ldg(t.weight + o * inputs + i), g);
  if (t.mask_relu && !(__ldg(x + i) > 0.0f)) g = 0.0f;
  return g;
}

// kStaged: where the input gradient goes: kFp32 into t.grad_in, kTf32 or kBf16 into the words of
// t.grad_in_staged (NHWC: pixel p, channel c is input c * pixels + p; channels padded with zeros).
template <Precision kStaged>
__global__ void __launch_bounds__(kBlockThreads)
    fc_softmax_kernel(FcSoftmaxTensors t, int n, int inputs, float label_smoothing) {
  start_after_previous_kernel();
  constexpr int kO = kSeedClasses;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warps = static_cast<int>(gridDim.x * (blockDim.x / 32));
  for (int s = static_cast<int>(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32); s < n; s += warps) {
    const float* __restrict__ x = t.in + static_cast<std::int64_t>(s) * inputs;
    float z[kO];
#pragma unroll
    for (int o = 0; o < kO; ++o) z[o] = 0.0f;
    for (int i = lane; i < inputs; i += 32) {
      const float xi = __ldg(x + i);
#pragma unroll
      for (int o = 0; o < kO; ++o) z[o] = fmaf(__ldg(t.weight + o * inputs + i), xi, z[o]);
    }
#pragma unroll
    for (int o = 0; o < kO; ++o) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) z[o] += __shfl_xor_sync(kFullMask, z[o], offset);
      z[o] += __ldg(t.bias + o);
    }
    // dz always into the registers: with the gradient's pointer chosen as `grad_logits ? dz : nullptr`,
    // nvcc 13.0 kept dz in local memory and stored the constant 0 for dz[1..9] (seen in the PTX).
    // tests/gpu_backend_kernels.cpp checks the kernel against its CPU twins.
    float dz[kO];
    float loss = 0.0f;
    int correct = 0;
    softmax_cross_entropy_sample(z, t.labels[s], label_smoothing, dz, loss, correct);
    if (lane == 0) {
      t.sample_loss[s] = loss;
      t.sample_correct[s] = correct;
    }
    // Lane o writes output o (a constant index into z and dz keeps them in registers).
#pragma unroll
    for (int o = 0; o < kO; ++o)
      if (lane == o) {
        if (t.logits != nullptr) t.logits[static_cast<std::int64_t>(s) * kO + o] = z[o];
        if (t.grad_logits != nullptr) t.grad_logits[static_cast<std::int64_t>(s) * kO + o] = dz[o];
      }
    if constexpr (kStaged == Precision::kFp32) {
      if (t.grad_in == nullptr) continue;
      float* __restrict__ grad_x = t.grad_in + static_cast<std::int64_t>(s) * inputs;
      for (int i = lane; i < inputs; i += 32) grad_x[i] = input_gradient(t, dz, x, inputs, i);
    } else {
      // One word of the sample's staged pixels per lane and step: a tf32 value, or the bf16 pair of
      // channels c, c+1 (consecutive lanes, consecutive words).
      constexpr int kPerWord = word_elements(kStaged);
      const int pixels = t.grad_in_staged.pixels;
      const int channels = inputs / pixels;
      const int words_per_pixel = t.grad_in_staged.channels_padded / kPerWord;
      const int words = pixels * words_per_pixel;
      std::uint32_t* __restrict__ sample = t.grad_in_staged.words + static_cast<std::int64_t>(s) * words;
      for (int w = lane; w < words; w += 32) {
        const int p = w / words_per_pixel;
        const int c0 = (w - p * words_per_pixel) * kPerWord;
        float g[2] = {0.0f, 0.0f};
#pragma unroll
        for (int q = 0; q < kPerWord; ++q)
          if (c0 + q < channels) g[q] = input_gradient(t, dz, x, inputs, (c0 + q) * pixels + p);
        sample[w] = pack_word<kStaged>(g[0], g[1]);
      }
    }
  }
}

}  // namespace

void fc_softmax_cross_entropy(const FcSoftmaxTensors& t, std::int64_t n, std::int64_t in_features,
                              float label_smoothing, cudaStream_t stream) {
  if (n <= 0) return;
  const bool staged = t.grad_in_staged.words != nullptr;
  const int pixels = t.grad_in_staged.pixels;
  if (staged && !holds_staged_samples(t.grad_in_staged, in_features))
    throw Error(ExitCode::kFailure, "internal error: fc_softmax's staged input gradient has " +
                                        std::to_string(t.grad_in_staged.channels_padded) + " channels at " +
                                        std::to_string(pixels) + " pixels for " + std::to_string(in_features) +
                                        " inputs");
  check_int_range(n * std::max<std::int64_t>(in_features, std::int64_t{pixels} * t.grad_in_staged.channels_padded),
                  "the last fc layer's input");
  const unsigned blocks = grid_for(n * 32);
  const int I = static_cast<int>(in_features);
  if (!staged)
    launch_dependent(fc_softmax_kernel<Precision::kFp32>, blocks, kBlockThreads, 0, stream, t, static_cast<int>(n), I,
                     label_smoothing);
  else if (t.grad_in_staged.precision == Precision::kBf16)
    launch_dependent(fc_softmax_kernel<Precision::kBf16>, blocks, kBlockThreads, 0, stream, t, static_cast<int>(n), I,
                     label_smoothing);
  else
    launch_dependent(fc_softmax_kernel<Precision::kTf32>, blocks, kBlockThreads, 0, stream, t, static_cast<int>(n), I,
                     label_smoothing);
  CNN_CHECK_LAUNCH();
}

}  // namespace cnn::cuda
