#!/usr/bin/env bash
# One device call that compares this tree ("after") with earlier trees (exports, e.g.
# `git archive REV -- ':!docs' | tar -x -C .carry/tree-REV`), printing compact results only:
#   1. builds every tree in parallel (the earlier ones: gpu_layers alone);
#   2. (STEPS includes tests) the after tree's precision and layer tests: gpu_precision,
#      gpu_precision_steps, gpu_staged_handover, gpu_staged_backward_handover, gpu_layer_networks,
#      gpu_layer_determinism, gpu_mma_tiles;
#   3. (STEPS includes epochs) the cifar preset's ms/epoch at batch 32, 128, 512 and 2048 in
#      PRECISIONS (default tf32,bf16), the trees in the order given, then after, ROUNDS times (default 2);
#   4. (STEPS includes torch) PyTorch's best (.carry/anchors/torch_cifar_best.py, from ../shared/anchors)
#      at the same batches and PRECISIONS, for the "x PyTorch" column in the same call;
#   5. (STEPS includes ncu) the after tree's kernels of two eager steps per batch (512, 2048) under ncu,
#      into $OUT/ncu.txt (kernels/bench/ncu_durations.py).
# Usage: OUT=$OUT TREES=".carry/tree-a .carry/tree-b" STEPS="tests epochs" bash kernels/bench/trees_device_run.sh
set -uo pipefail
steps=" ${STEPS:-tests epochs} "
read -r -a trees <<<"${TREES:-}"
out=${OUT:-gpu-out}; mkdir -p "$out"; out=$(cd "$out" && pwd)
logs=$(mktemp -d)
export CNN_FASHION_DIR=$PWD/.carry/fashion-mnist CNN_MNIST_DIR=$PWD/.carry/mnist
source kernels/bench/device_run_lib.sh
start=$(date +%s)
nvidia-smi -L; date -u +%FT%TZ
tests=(gpu_precision gpu_precision_steps gpu_staged_handover gpu_staged_backward_handover gpu_layer_networks
       gpu_layer_determinism gpu_mma_tiles)
(configure . build-after after && ninja -C build-after -j 12 gpu_layers "${tests[@]}" >"$logs/after.log" 2>&1
 echo "after build $?"; grep -m3 error "$logs/after.log") &
for tree in "${trees[@]}"; do
  (configure "$tree" "$tree/build" "$(basename "$tree")" && ninja -C "$tree/build" -j 4 gpu_layers >"$logs/$(basename "$tree").log" 2>&1
   echo "$tree build $?") &
done
wait; echo "built at $(($(date +%s) - start)) s"

if [[ $steps == *" tests "* ]]; then
  for t in "${tests[@]}"; do
    timeout 300 "build-after/tests/$t" >"$logs/$t.test" 2>&1; echo "$t exit $?"
  done
  cat "$logs"/*.test | grep -E "worst tensor|error|failure|No errors" | head -20
fi
if [[ $steps == *" epochs "* ]]; then
  epochs() { CNN_MEASURE_PRECISIONS=${PRECISIONS:-tf32,bf16} timeout 300 "$1/tests/gpu_layers" --run_test=measure_cifar_epoch_time 2>&1 |
    grep -E "^(32|128|512|2048) " | awk '{print $1, $2, $4}'; }
  all=("${trees[@]}" build-after)
  for ((round = 1; round <= ${ROUNDS:-2}; ++round)); do
    for i in "${!all[@]}"; do
      dir=${all[$i]}; [[ $dir == build-after ]] || dir=$dir/build
      epochs "$dir" >"$logs/epochs-$i-$round"
    done
  done
  echo "ms/epoch: batch precision | ${all[*]}, round by round"
  for i in "${!all[@]}"; do
    for ((round = 1; round <= ${ROUNDS:-2}; ++round)); do awk '{print $3}' "$logs/epochs-$i-$round" >"$logs/col-$i-$round"; done
  done
  paste -d' ' <(awk '{print $1, $2}' "$logs/epochs-0-1") "$logs"/col-* | sed 's/ / | /2'
fi
if [[ $steps == *" torch "* ]]; then
  timeout 400 python3 .carry/anchors/torch_cifar_best.py '[32,128,512,2048]' "${PRECISIONS:-tf32,bf16}" \
    >"$logs/torch.log" 2>&1
  echo "torch exit $?"; grep -v "^ *$" "$logs/torch.log" | tail -12
fi
if [[ $steps == *" ncu "* ]] && command -v ncu >/dev/null; then
  ncu_cifar_steps build-after "${PRECISIONS:-tf32,bf16}" "$logs" "$out/ncu.txt"
fi
echo "done at $(($(date +%s) - start)) s"
rm -rf "$logs"
