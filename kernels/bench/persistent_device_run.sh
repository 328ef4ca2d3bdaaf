#!/usr/bin/env bash
# One device call for the persistent seed kernel (kernels/ops/seed_persistent.cu): builds this tree,
# then, each step under its own time limit:
#   1. gpu_persistent (against seq, every optimizer, bitwise reruns and chunk boundaries, stop word,
#      NaN hook, refusals) and the gpu_backend and gpu_backend_kernels cases its changes touch (the
#      optimizer kernels);
#   2. ms/epoch, ordinary step against the persistent kernel (gpu_persistent --run_test=
#      measure_persistent_epoch), and PyTorch's best (.carry/anchors/torch_seed_best.py) in the same call;
#   3. compute-sanitizer memcheck, racecheck and synccheck on the stop-word and NaN test (small steps).
# SANITIZE=0 leaves 3 out, TORCH=0 the PyTorch anchor. It builds in build-gpu, as gpu_tests_device_run.sh does,
# so the two can share one call. Logs go to $OUT (default ./gpu-out).
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
nvidia-smi -L | tee "$out/gpus.txt"
source "$(dirname "$0")/device_run_lib.sh"
start=$(date +%s)
configure . build-gpu gpu && ninja -C build-gpu -j "$(nproc)" gpu_persistent gpu_backend gpu_backend_kernels >"$out/build.log" 2>&1
echo "build: exit $? at $(($(date +%s) - start)) s"
grep -E "error" "$out/build.log" | head -20
run 300 persistent build-gpu/tests/gpu_persistent
grep -E "error|passed|failed|No errors" "$out/persistent.log" | head -40
run 200 backend build-gpu/tests/gpu_backend --run_test=one_step_matches_seq,identical_runs_give_identical_bits
run 100 backend-kernels build-gpu/tests/gpu_backend_kernels --run_test=optimizer_kernels_match_cpu_twins
cat "$out/backend.log" "$out/backend-kernels.log" | grep -E "error|passed|failed|No errors" | head -20
run 240 measure build-gpu/tests/gpu_persistent --run_test=measure_persistent_epoch
cat "$out/measure.log"
if [[ ${TORCH:-1} == 1 ]]; then
  run 300 torch python3 .carry/anchors/torch_seed_best.py '[[1000,64],[1000,256],[100,64],[100,256]]' fp32,bf16
  tail -12 "$out/torch.log"
fi
if [[ ${SANITIZE:-1} == 1 ]]; then
  for tool in memcheck racecheck synccheck; do
    run 150 "sanitize-$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 build-gpu/tests/gpu_persistent \
      --run_test=the_stop_word_and_a_nonfinite_gradient_end_a_chunk_at_a_step_boundary
    tail -4 "$out/sanitize-$tool.log"
  done
fi
echo "total: $(($(date +%s) - start)) s"
