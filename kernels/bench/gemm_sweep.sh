#!/usr/bin/env bash
# One device call that tunes the implicit GEMM's launch plan (kernels/gemm_plan.cu) on the cifar
# preset: builds gpu_layers once per tile depth in BKS (CNN_GEMM_BK, default "8 16"), runs the layer
# tests on each build (so a tuning that breaks a result is seen at once), then the cifar ms/epoch for
# every CNN_GEMM_THREADS_PER_SM x CNN_GEMM_MAX_SPLITS x CNN_GEMM_MIN_TILES_PER_SPLIT triple in
# THREADS / SPLITS / MIN_TILES. Logs go to $OUT.
# Usage, from the tree: THREADS="512 1024" SPLITS="512 2048" MIN_TILES="4 16" bash kernels/bench/gemm_sweep.sh
set -uo pipefail
out=${OUT:-gpu-out}
bks=${BKS:-"8 16"}
threads=${THREADS:-"512 1024"}
splits=${SPLITS:-"512 2048"}
min_tiles=${MIN_TILES:-4}
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
  for t in $threads; do
    for s in $splits; do
      for m in $min_tiles; do
        echo "--- BK $bk, threads/SM $t, max splits $s, min k-tiles per split $m"
        CNN_GEMM_THREADS_PER_SM=$t CNN_GEMM_MAX_SPLITS=$s CNN_GEMM_MIN_TILES_PER_SPLIT=$m timeout 100 \
          "build-bk$bk/tests/gpu_layers" --run_test=measure_cifar_epoch_time 2>&1 | grep -E "^[0-9]+ +on "
      done
    done
  done
done
echo "total: $(($(date +%s) - start)) s"
