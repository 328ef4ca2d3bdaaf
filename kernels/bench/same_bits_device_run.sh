#!/usr/bin/env bash
# One device call for a change that must keep every bit of training (a kernel rewritten, a pass
# fused): builds this tree ("after") and BEFORE_DIR (an export of the tree before, e.g.
# `git archive REV -- ':!docs' | tar -x -C .carry/tree-base`) in parallel, then
#   1. trains the cifar preset on Fashion-MNIST (4000 images, batch 512, 2 epochs, Adam) with each tree
#      in each of PRECISIONS (default tf32,bf16) and compares the checkpoints bit for bit
#      (tests/ckpt_compare.py exact);
#   2. tests/gpu_precision_test.sh on the after tree (determinism, resume, 2 ranks, 3-epoch fidelity),
#      unless PRECISION_TEST=0 (bitwise checkpoints already carry its results over);
#   3. compute-sanitizer memcheck, racecheck and synccheck on SANITIZE (default gpu_staged_handover), after tree.
# Usage: BEFORE_DIR=.carry/tree-base bash kernels/bench/same_bits_device_run.sh
set -uo pipefail
before=${BEFORE_DIR:-.carry/tree-base}
logs=$(mktemp -d); out=$logs
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CNN_FASHION_DIR=$PWD/.carry/fashion-mnist CNN_MNIST_DIR=$PWD/.carry/mnist
source kernels/bench/device_run_lib.sh
start=$(date +%s)
nvidia-smi -L; date -u +%FT%TZ
sanitize=${SANITIZE:-gpu_staged_handover}
(configure . build-after after && ninja -C build-after -j 12 cnn_mpi "$sanitize" >"$logs/a.log" 2>&1
 echo "after build $?"; grep -m3 error "$logs/a.log") &
(configure "$before" "$before/build" before && ninja -C "$before/build" -j 4 cnn_mpi >"$logs/b.log" 2>&1
 echo "before build $?") &
wait; echo "built at $(($(date +%s) - start)) s"

run=(--device gpu --data "$CNN_FASHION_DIR" --model cifar --train-samples 4000 --test-samples 500 --batch 512
     --epochs 2 --optimizer adam --lr 0.001)
IFS=, read -r -a precisions <<<"${PRECISIONS:-tf32,bf16}"
for p in "${precisions[@]}"; do
  timeout 120 build-after/cnn_mpi "${run[@]}" --precision "$p" --out "$logs/$p-after" >"$logs/$p-after.log" 2>&1
  timeout 120 "$before/build/cnn_mpi" "${run[@]}" --precision "$p" --out "$logs/$p-before" >"$logs/$p-before.log" 2>&1
  a="$logs/$p-after/checkpoints/$(cat "$logs/$p-after/checkpoints/latest")"
  b="$logs/$p-before/checkpoints/$(cat "$logs/$p-before/checkpoints/latest")"
  verdict=$(python3 tests/ckpt_compare.py exact "$a" "$b" 2>&1)
  echo "$p, after against before: exit $?, $(tail -1 <<<"$verdict")"
done
if [[ ${PRECISION_TEST:-1} == 1 ]]; then
  (cd build-after && PYTHON=python3 timeout 300 bash ../tests/gpu_precision_test.sh . .. >"$logs/script.log" 2>&1
   echo "gpu_precision_test.sh exit $?")
  grep -E "^(ok|FAIL|skip)|mean" "$logs/script.log"
fi
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool "$tool" "build-after/tests/$sanitize" >"$logs/$tool.log" 2>&1
  echo "compute-sanitizer $tool $sanitize: exit $?, $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logs/$tool.log" | tail -1)"
done
echo "done at $(($(date +%s) - start)) s"
rm -rf "$logs"
