#!/usr/bin/env bash
# One device call that compares the implicit GEMM's tile depth (kernels/ops/implicit_gemm.cuh) on the cifar
# preset: builds gpu_layers once per tile depth in BKS (CNN_GEMM_BK, default "8 16"), runs the layer
# tests on each build (so a change that breaks a result is seen at once), then the cifar ms/epoch of
# each build. Logs go to $OUT.
# History: until the plan's targets became constants (kernels/ops/gemm_plan.cu), this script also swept
# the environment knobs CNN_GEMM_THREADS_PER_SM, CNN_GEMM_MAX_SPLITS and CNN_GEMM_MIN_TILES_PER_SPLIT
# (THREADS / SPLITS / MIN_TILES); those knobs are retired, their results are in docs/PERFORMANCE.md.
# To try other targets now, edit the constants and build once per value.
# Usage, from the tree: BKS="8 16" bash kernels/bench/gemm_sweep.sh
set -uo pipefail
out=${OUT:-gpu-out}
bks=${BKS:-"8 16"}
mkdir -p "$out"
nvidia-smi -L
start=$(date +%s)
for bk in $bks; do
  (cmake -S . -B "build-bk$bk" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DCMAKE_CUDA_FLAGS="-DCNN_GEMM_BK=$bk" >"$out/cmake-bk$bk.log" 2>&1 &&
     ninja -C "build-bk$bk" -j "$(($(nproc) / 2))" gpu_layers >"$out/build-bk$bk.log" 2>&1
   echo "bk $bk: build exit $? at $(($(date +%s) - start)) s") &
done
wait
for bk in $bks; do
  timeout 150 "build-bk$bk/tests/gpu_layers" >"$out/layers-bk$bk.log" 2>&1
  echo "bk $bk: gpu_layers exit $? ($(grep -c "error" "$out/layers-bk$bk.log") error lines)"
done
for bk in $bks; do
  echo "--- BK $bk"
  timeout 100 "build-bk$bk/tests/gpu_layers" --run_test=measure_cifar_epoch_time 2>&1 | grep -E "^[0-9]+ +on "
done
echo "total: $(($(date +%s) - start)) s"
