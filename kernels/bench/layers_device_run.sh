#!/usr/bin/env bash
# One device call for the general-network GPU work (issue 7): builds this tree ("after") and, when
# BEFORE_DIR holds a checkout of the commit before it, that tree ("before", seed timings only), in
# parallel; then runs, each under its own time limit so that one hang cannot take the rest:
#   1. gpu_layers, gpu_layer_networks, gpu_layer_determinism: every layer op against its CPU twin, the
#      cuda backend's layer ops against seq and against the fused seed op, determinism;
#   2. the cifar preset's ms/epoch at batch 32, 128, 512 (gpu_layers --run_test=measure_cifar_epoch_time);
#   3. the seed model's ms/epoch, before and after (gpu_backend --run_test=measure_epoch_time);
#   4. the whole gpu_backend suite (gpu_backend, gpu_backend_kernels, gpu_backend_randomness; after);
#   5. per-kernel durations of a few cifar steps (ncu), when time is left.
# SKIP_BACKEND=1 / SKIP_NCU=1 leave out steps 4 / 5. Logs go to $OUT (default ./gpu-out); the tool
# that brings $OUT back may take only 8 files, so the timings are also printed. Usage, from the tree:
#   BEFORE_DIR=/path/to/old/checkout bash kernels/bench/layers_device_run.sh
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi -L | tee "$out/gpus.txt"
nvcc --version | tail -2
jobs=$(nproc)
source "$(dirname "$0")/device_run_lib.sh"
start=$(date +%s)
(configure . build-after after && ninja -C build-after -j "$jobs" gpu_layers gpu_layer_networks gpu_layer_determinism \
     gpu_backend gpu_backend_kernels gpu_backend_randomness >"$out/build-after.log" 2>&1
 echo "after: build exit $? at $(($(date +%s) - start)) s") &
if [[ -n ${BEFORE_DIR:-} ]]; then
  (configure "$BEFORE_DIR" "$BEFORE_DIR/build-before" before &&
     ninja -C "$BEFORE_DIR/build-before" -j "$((jobs / 2))" gpu_backend >"$out/build-before.log" 2>&1
   echo "before: build exit $? at $(($(date +%s) - start)) s") &
fi
wait
grep -E "error" "$out/build-after.log" | head -20

run 150 layers build-after/tests/gpu_layers --log_level=test_suite
grep -E "^  |^cifar|^seed|^conv|error|fail|passed|No errors" "$out/layers.log" | head -80
for t in layer_networks layer_determinism; do
  run 150 "$t" "build-after/tests/gpu_$t" --log_level=test_suite
  grep -E "^  |^cifar|^seed|^conv|error|fail|passed|No errors" "$out/$t.log" | head -80
done
run 100 cifar-timing build-after/tests/gpu_layers --run_test=measure_cifar_epoch_time
cat "$out/cifar-timing.log" | grep -v "^Running\|^$"
if [[ -n ${BEFORE_DIR:-} ]]; then
  run 60 seed-timing-before "$BEFORE_DIR/build-before/tests/gpu_backend" --run_test=measure_epoch_time
  grep -E "^[0-9]|batch" "$out/seed-timing-before.log"
fi
run 60 seed-timing-after build-after/tests/gpu_backend --run_test=measure_epoch_time
grep -E "^[0-9]|batch" "$out/seed-timing-after.log"
if [[ -z ${SKIP_BACKEND:-} ]]; then
  run 120 backend build-after/tests/gpu_backend
  tail -3 "$out/backend.log"
  for t in backend_kernels backend_randomness; do
    run 120 "$t" "build-after/tests/gpu_$t"
    tail -3 "$out/$t.log"
  done
fi
if [[ -z ${SKIP_NCU:-} ]] && command -v ncu >/dev/null; then
  run 60 ncu ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    build-after/tests/gpu_layers --run_test=profile_cifar_steps
  python3 kernels/bench/ncu_durations.py "$out/ncu.log" >"$out/ncu-kernels.txt" 2>&1
  head -120 "$out/ncu-kernels.txt"
fi
echo "total: $(($(date +%s) - start)) s"
