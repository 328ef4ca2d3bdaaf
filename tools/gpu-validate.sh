#!/usr/bin/env bash
# Builds cnn_mpi on a GPU machine and runs every GPU check in one go, writing logs to $OUT (or ./gpu-out):
#   the GPU unit tests, the GPU end-to-end script test (learning, determinism, 2-rank NCCL when 2+
#   GPUs, compute-sanitizer), the GPU SLURM script's launch line under mpirun, and train-step timings.
# Usage: tools/gpu-validate.sh [DATA_DIR]   DATA_DIR holds fashion-mnist/ and mnist/ (default .carry)
set -uo pipefail
cd "$(dirname "$0")/.."
data=${1:-.carry}
out=${OUT:-gpu-out}
mkdir -p "$out"
log_dir=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CNN_FASHION_DIR=$PWD/$data/fashion-mnist CNN_MNIST_DIR=$PWD/$data/mnist
nvidia-smi -L | tee "$out/gpus.txt"
arch=${CUDA_ARCH:-90a}
start=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$out/cmake.log" 2>&1 &&
  cmake --build build -j "$(nproc)" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log" "$out/cmake.log"; exit 1; }
echo "build: $(($(date +%s) - start)) s"
grep -E "CUDA backend|NCCL|Boost.Test" "$out/cmake.log"

status=0
echo "--- smoke: short GPU training runs (the seed's fused op; layer ops with residual blocks; the cifar"
echo "    preset and the residual network on tensor cores, bf16 and tf32), and compute-sanitizer"
echo "    memcheck, racecheck, initcheck on each (logs in \$OUT)"
data=(--device gpu --data "$CNN_FASHION_DIR" --train-samples 300 --test-samples 100 --batch 100 --epochs 1)
residual="conv3x3:16/p1 relu res[conv3x3:16/p1 relu conv3x3:16/p1] relu res[conv3x3:32/s2/p1 relu conv3x3:32/p1] relu maxpool2 fc:10"
declare -A smoke_model=([seed]="seed" [residual]="$residual" [cifar-bf16]="cifar" [residual-tf32]="$residual")
declare -A smoke_precision=([seed]=fp32 [residual]=fp32 [cifar-bf16]=bf16 [residual-tf32]=tf32)
for name in seed residual cifar-bf16 residual-tf32; do
  smoke=("${data[@]}" --filters 32 --model "${smoke_model[$name]}" --precision "${smoke_precision[$name]}")
  ./build/cnn_mpi "${smoke[@]}" --out "runs/smoke-$name" >"$out/smoke-$name.log" 2>&1; echo "smoke $name exit $?"
  tail -2 "$out/smoke-$name.log"
  for tool in memcheck racecheck initcheck; do
    compute-sanitizer --tool "$tool" "./build/cnn_mpi" "${smoke[@]}" --out "runs/smoke-$name-$tool" >"$out/$name-$tool.log" 2>&1
    echo "$name $tool exit $?: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/$name-$tool.log" | tail -1)"
    grep -E "=========" "$out/$name-$tool.log" | grep -v SUMMARY | head -10
  done
done

(cd build && CNN_TEST_LOG_DIR="$log_dir" ctest -L gpu --output-on-failure --timeout 500) 2>&1 | tee "$out/ctest-gpu.log" | tail -40 || status=1

echo "--- SLURM GPU script: the mpirun launch line it generates, run as printed"
gpus=$(nvidia-smi -L | grep -c '^GPU')
line=$(DRY_RUN=1 LAUNCHER=mpirun GPUS_PER_NODE="$gpus" CNN_DATA="$CNN_FASHION_DIR" CNN_OUT="$PWD/runs/gpu-script" \
  bash jobs/train-gpu.sbatch --epochs 1 --filters 64 --batch 1000 --quiet 2>"$out/dryrun.err" | tail -1)
echo "$line" | tee "$out/launch-line.txt"
bash -c "$line" 2>&1 | tee "$out/launch-run.log" | tail -6 || status=1

echo "--- train-step timings (trainer, 60000 images, median of epochs 2-4, 1 warm-up epoch)"
for setting in 1000:64 1000:256 100:64 100:256; do
  batch=${setting%%:*}; filters=${setting##*:}
  run="runs/timing-$batch-$filters"
  rm -rf "$run"
  ./build/cnn_mpi --device gpu --data "$CNN_FASHION_DIR" --batch "$batch" --filters "$filters" --epochs 4 \
    --test-samples 10000 --out "$run" --quiet >"$out/timing-$batch-$filters.log" 2>&1 || { status=1; continue; }
  # metrics.csv column 6 is the epoch's training-step seconds; epoch 1 is the warm-up.
  awk -F, 'NR > 2 { print $6 * 1000 }' "$run/metrics.csv" | sort -g |
    awk -v b="$batch" -v d="$filters" '{ v[++n] = $1 } END { m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2;
      printf "batch %5d d=%3d: %.2f ms/epoch (min %.2f, max %.2f)\n", b, d, m, v[1], v[n] }' | tee -a "$out/timings.txt"
  cp "$run/timing.csv" "$out/timing-$batch-$filters.csv"
done

anchor=$data/anchors/torch_seed_cnn.py
if [[ -f $anchor && -z ${SKIP_PYTORCH:-} ]] && python3 -c "import torch" 2>/dev/null; then
  echo "--- PyTorch reference on this machine (same workload, data on the GPU)"
  timeout 240 python3 "$anchor" cuda 60000 '[[1000, 64], [1000, 256], [100, 64], [100, 256]]' 2>&1 |
    grep -v "^strict\|filters= *[0-9]* mode=.*strict" | tee "$out/pytorch.txt" | head -12
fi
exit $status
