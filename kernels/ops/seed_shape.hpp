// The shapes the CUDA kernels are compiled for. Fixing them at compile time keeps each thread's
// input patch, weights and accumulators in registers (run-time sizes would put them in local memory).
#pragma once

namespace cnn::cuda {

constexpr int kSeedKernel = 3;    // 3x3 convolution
constexpr int kSeedClasses = 10;  // MNIST, Fashion-MNIST, CIFAR-10
constexpr int kPoolWindow = 2;    // 2x2/2 max-pool
// A pool cell's 2x2 conv outputs read a (2+3-1)^2 = 4x4 input patch.
constexpr int kPatch = kPoolWindow + kSeedKernel - 1;
constexpr int kTaps1 = kSeedKernel * kSeedKernel;
// uint8 pixel -> [0, 1]: a multiplication by the rounded reciprocal, exactly as the CPU twin
// (src/ops/gather.cpp), so that both see bit-identical inputs.
constexpr float kPixelScale = 1.0f / 255.0f;

}  // namespace cnn::cuda
