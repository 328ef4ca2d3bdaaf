#!/usr/bin/env bash
# Learning on real data with the seed CNN (d=32, batch 100, plain SGD, lr 0.1), through the real binary:
#   Fashion-MNIST: >= 82% test accuracy after 1 epoch   (PyTorch, same model and settings: 84.2%)
#   MNIST:         >= 95.5% after 2 epochs when ../shared/data/mnist exists  (PyTorch: 96.5%)
# Usage: learning_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
binary=${CNN_BINARY:-$build/cnn_mpi}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Prints the last epoch's test accuracy (percent) from a run directory's metrics.csv.
final_accuracy() { awk -F, 'NR > 1 { acc = $4 } END { printf "%.2f", 100 * acc }' "$1/metrics.csv"; }
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }

fashion=/usr/share/datasets/fashion-mnist
if [[ ! -d $fashion ]]; then
  echo "SKIP: Fashion-MNIST not installed at $fashion (tools/install-deps.sh installs it)"
  exit 77
fi
"$binary" --dataset fashion --data "$fashion" --filters 32 --batch 100 --lr 0.1 --epochs 1 --out "$work/fashion" --quiet
accuracy=$(final_accuracy "$work/fashion")
echo "fashion: ${accuracy}% after 1 epoch (need >= 82%)"
at_least "$accuracy" 82 || { echo "FAIL: Fashion-MNIST accuracy ${accuracy}% < 82%"; exit 1; }

mnist=${CNN_SHARED_DIR:-$2/../shared}/data/mnist
if [[ -d $mnist ]]; then
  "$binary" --dataset mnist --data "$mnist" --filters 32 --batch 100 --lr 0.1 --epochs 2 --out "$work/mnist" --quiet
  accuracy=$(final_accuracy "$work/mnist")
  echo "mnist: ${accuracy}% after 2 epochs (need >= 95.5%)"
  at_least "$accuracy" 95.5 || { echo "FAIL: MNIST accuracy ${accuracy}% < 95.5%"; exit 1; }
else
  echo "SKIP (MNIST part): $mnist not present"
fi
echo "learning_test: passed"
