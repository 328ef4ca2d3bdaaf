#!/usr/bin/env bash
# One device call for the deferred divergence check (kernels/ops/nonfinite.cu, src/train/divergence.cpp):
# builds cnn_mpi and the GPU unit tests, runs them and tests/gpu_train_test.sh (which includes the
# compute-sanitizer runs and the divergence cases), then times the trainer with the deferred check.
# The waiting check and its switch CNN_DEFERRED_NONFINITE=0 are retired (issue 23); the A/B they gave
# is recorded in docs/PERFORMANCE.md and docs/RELIABILITY.md.
# Usage: tools/gpu-check-divergence.sh [DATA_DIR]   DATA_DIR holds fashion-mnist/ (default .carry)
#   env: OUT (logs, default gpu-out), EPOCHS (default 5; median of epochs 2..EPOCHS), SETTINGS
set -uo pipefail
cd "$(dirname "$0")/.."
data=${1:-.carry}
out=${OUT:-gpu-out}
epochs=${EPOCHS:-5}
settings=${SETTINGS:-"1000:64 1000:256 100:64 100:256"}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 CNN_FASHION_DIR=$PWD/$data/fashion-mnist CNN_MNIST_DIR=$PWD/$data/mnist
source tools/mpi-env.sh
nvidia-smi -L
start=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90a}" \
  >"$out/cmake.log" 2>&1 &&
  cmake --build build -j "$(nproc)" --target cnn_mpi gpu_backend gpu_backend_kernels gpu_backend_randomness \
    gpu_layers gpu_layer_networks gpu_layer_determinism >"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log" "$out/cmake.log"; exit 1; }
echo "build: $(($(date +%s) - start)) s"
status=0
for unit in gpu_backend gpu_backend_kernels gpu_backend_randomness gpu_layers gpu_layer_networks gpu_layer_determinism; do
  ./build/tests/$unit >"$out/$unit.log" 2>&1; rc=$?
  echo "$unit exit $rc: $(tail -1 "$out/$unit.log")"
  [[ $rc -eq 0 ]] || { status=1; grep -m10 -E "error|fail" "$out/$unit.log"; }
done
PYTHON=python3 bash tests/gpu_train_test.sh build . >"$out/gpu_train_test.log" 2>&1 || status=1
grep -E "^(ok|FAIL|skip)|gpu_train_test" "$out/gpu_train_test.log"

echo "--- trainer ms/epoch (60000 images, median of epochs 2-$epochs): deferred check, two runs"
median() { sort -g | awk '{ v[++n] = $1 } END { printf "%.2f", (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'; }
for setting in $settings; do
  batch=${setting%%:*}; filters=${setting##*:}
  line="batch $batch d=$filters:"
  for repeat in 1 2; do  # two runs show the drift between them
    run="runs/t-$batch-$filters-$repeat"
    rm -rf "$run"
    ./build/cnn_mpi --device gpu --data "$CNN_FASHION_DIR" --batch "$batch" \
      --filters "$filters" --epochs "$epochs" --test-samples 10000 --out "$run" --quiet >/dev/null 2>&1 || status=1
    # metrics.csv column 6 is the epoch's training-step seconds; epoch 1 is the warm-up.
    line+=" deferred $(awk -F, 'NR > 2 { print $6 * 1000 }' "$run/metrics.csv" | median)"
  done
  echo "$line" | tee -a "$out/timings.txt"
done
exit $status
