#!/usr/bin/env bash
# One device call for a change to the tensor-core products (issue 24), printing compact results
# only (no logs left in $OUT): builds this tree ("after") and BEFORE_DIR in parallel, runs
# gpu_precision's and gpu_precision_steps' fidelity tests on the after tree, then alternates before and after for
#   the products of conv2 and conv3 alone at batch 512 and 2048 (measure_layer_products, the planned
#   and the common tiles), and the cifar preset's ms/epoch in tf32 and bf16 (measure_cifar_epoch_time).
# Usage: BEFORE_DIR=.carry/before24 bash kernels/bench/products_ab_device_run.sh
set -uo pipefail
before=${BEFORE_DIR:-.carry/before24}
out=$(mktemp -d)
source kernels/bench/device_run_lib.sh
start=$(date +%s)
nvidia-smi -L; date -u +%FT%TZ
(configure . build-after after && ninja -C build-after -j 12 gpu_precision gpu_precision_steps gpu_layers >"$out/a.log" 2>&1; echo "after build $?") &
(configure "$before" build-before-ab before && ninja -C build-before-ab -j 4 gpu_precision gpu_layers >"$out/b.log" 2>&1
 echo "before build $?") &
wait; echo "built at $(($(date +%s) - start)) s"
grep -m3 error "$out/a.log"
timeout 300 build-after/tests/gpu_precision >"$out/p.log" 2>&1; echo "gpu_precision exit $?"
timeout 300 build-after/tests/gpu_precision_steps >"$out/ps.log" 2>&1; echo "gpu_precision_steps exit $?"
cat "$out/p.log" "$out/ps.log" | grep -E "worst tensor|error|failure|No errors" | head -12
products() {  # TREE -> "layer n prec pass tile us" lines
  timeout 300 "$1/tests/gpu_precision" --run_test=measure_layer_products 2>&1 |
    grep -E "^conv[23] +(512|2048) (bf16|tf32) +(forward|dgrad|wgrad) staged (planned|64x64|128x64|128x32|64x128|256x32)[ /]" |
    awk '{print $1, $2, $3, $4, $6, $(NF-1)}'
}
epochs() { CNN_MEASURE_PRECISIONS=tf32,bf16 timeout 300 "$1/tests/gpu_layers" --run_test=measure_cifar_epoch_time 2>&1 |
  grep -E "^(32|128|512|2048) " | awk '{print $1, $2, $4}'; }
products build-before-ab >"$out/pb1"; products build-after >"$out/pa1"
echo "products, us: layer n precision pass tile | before | after (-: no such tile in that tree)"
# Matched by name: a tree may time tiles the other has not (the 4-warp tiles, named 128x64/2x2 ...).
awk 'NR == FNR {before[$1" "$2" "$3" "$4" "$5] = $6; next}
     {key = $1" "$2" "$3" "$4" "$5; printf "%s | %s | %s\n", key, (key in before) ? before[key] : "-", $6}' \
  "$out/pb1" "$out/pa1"
for round in 1 2; do epochs build-before-ab >"$out/eb$round"; epochs build-after >"$out/ea$round"; done
echo "ms/epoch: batch precision | before round 1, 2 | after round 1, 2"
paste -d' ' "$out/eb1" <(awk '{print $3}' "$out/eb2") <(awk '{print $3}' "$out/ea1") <(awk '{print $3}' "$out/ea2") |
  awk '{printf "%s %s | %s %s | %s %s\n", $1,$2,$3,$4,$5,$6}'
echo "done at $(($(date +%s) - start)) s"
rm -rf "$out"
