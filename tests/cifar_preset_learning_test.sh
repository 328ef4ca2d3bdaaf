#!/usr/bin/env bash
# The `cifar` preset (conv3x3:32 relu maxpool2 conv3x3:64 relu maxpool2 conv3x3:64 relu fc:64 relu fc:10,
# on 1x28x28 it runs 28 -> 26 -> 13 -> 11 -> 5 -> 3) learns Fashion-MNIST with Adam through the real
# binary and the CPU backend running it layer by layer (conv_relu_pool first): >= 88% test accuracy after 3 epochs (issue 7).
# Settings: Adam lr 0.001 (PyTorch/Keras default betas), global batch 32 (as Keras), 2 threads, seed 1.
# Measured on the 2-core VM: 89.25% (batch 64 gave 88.38%, too close to the bar).
# Usage: cifar_preset_learning_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
binary=${CNN_BINARY:-$build/cnn_mpi}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

final_accuracy() { awk -F, 'NR > 1 { acc = $4 } END { printf "%.2f", 100 * acc }' "$1/metrics.csv"; }
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }

fashion=/usr/share/datasets/fashion-mnist
if [[ ! -d $fashion ]]; then
  echo "SKIP: Fashion-MNIST not installed at $fashion (tools/install-deps.sh installs it)"
  exit 77
fi
start=$(date +%s)
"$binary" --dataset fashion --data "$fashion" --model cifar --optimizer adam --lr 0.001 --batch 32 --epochs 3 \
  --backend threads --threads 2 --out "$work/cifar" --quiet
accuracy=$(final_accuracy "$work/cifar")
echo "cifar preset on fashion: ${accuracy}% after 3 epochs (need >= 88%), $(($(date +%s) - start)) s"
at_least "$accuracy" 88 || { echo "FAIL: cifar preset accuracy ${accuracy}% < 88%"; exit 1; }
echo "cifar_preset_learning_test: passed"
