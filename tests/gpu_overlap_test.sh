#!/usr/bin/env bash
# The overlapped GPU step (label gpu; exit 77 = skipped with fewer than 2 GPUs): 2 ranks, one per GPU,
# NCCL, 20 steps (2000 images, batch 100). With --overlap on, the parameters equal those of
# --overlap off BITWISE, for each bucket grouping (CNN_OVERLAP_CUTS: 1 = the fc bucket's allreduce
# starts before the conv part of the backward finishes, 0 = one bucket) and both with the step
# captured as a CUDA graph (communication inside) and eagerly (CNN_CUDA_GRAPHS=0). The logs hold the
# overlap: allreduce.csv says overlap=1 with the buckets used, and scaling.log names the choice.
# The same for the cifar preset, whose ready points are its five layers with parameters: a bucket at
# each (CNN_OVERLAP_CUTS=15) and one bucket (0).
# Usage: gpu_overlap_test.sh BUILD_DIR SOURCE_DIR   (env: CNN_FASHION_DIR, PYTHON)
source "$2/tests/gpu_two_ranks_lib.sh" "$1" "$2"

require_two_gpus "the overlap test"
if grep -q 'CNN_ENABLE_CUDA:STRING=OFF' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "SKIP: this build has no CUDA backend"
  exit 77
fi
if why=$(trainer_runs_unavailable) && [[ -n $why ]]; then
  echo "SKIP: $why"
  exit 77
fi

# One step per call: the overlap belongs to it (auto could run the seed model's steps inside the
# persistent kernel, and its measurement could take either path in runs that must be bitwise).
small=(--device gpu --data "$fashion" --train-samples 2000 --test-samples 500 --filters 64 --batch 100 --epochs 1
       --allreduce nccl --steps-per-launch 1 --quiet)

run off CNN_OVERLAP_CUTS=0 -- --overlap off || { echo "gpu_overlap_test: the reference run failed"; exit 1; }
# Each overlapped run's allreduce.csv says overlap=1 with the buckets of its plan.
check_overlap_run() {
  local buckets expected
  buckets=$(awk -F, 'NR == 2 { print $8 ":" $9 }' "$work/$1/allreduce.csv")
  expected="1:$(($2 == 1 ? 2 : 1))"
  [[ $buckets == "$expected" ]] && pass "$1: allreduce.csv overlap:buckets $buckets" ||
    fail "$1: allreduce.csv overlap:buckets $buckets, expected $expected"
}
overlap_grid ""
grep -q "path=nccl" "$work/on-graphs1-cuts1/scaling.log" 2>/dev/null && grep -q "overlap=on" "$work/on-graphs1-cuts1/scaling.log" &&
  pass "scaling.log: $(cut -c1-160 "$work/on-graphs1-cuts1/scaling.log")" || fail "scaling.log lacks the choice"
grep -h "scaling advisor\|overlap:\|predicted" "$work/on-graphs1-cuts1.log" | sed 's/^/     /'
awk -F, 'NR == 2 { printf "     allreduce.csv: mean_s %s busbw %s exposed_s %s overlap_fraction %s\n", $5, $7, $10, $11 }' \
  "$work/on-graphs1-cuts1/allreduce.csv"

# The cifar preset (conv_relu_pool conv+relu maxpool conv+relu fc+relu fc_softmax).
small=(--device gpu --data "$fashion" --train-samples 2000 --test-samples 500 --model cifar --batch 100 --epochs 1
       --optimizer adam --lr 0.001 --allreduce nccl --quiet)
if run cifar-off CNN_OVERLAP_CUTS=0 -- --overlap off; then
  for graphs in 1 0; do
    for cuts in 15 0; do
      name="cifar-on-graphs$graphs-cuts$cuts"
      run "$name" CNN_CUDA_GRAPHS=$graphs CNN_OVERLAP_CUTS=$cuts -- --overlap on || continue
      buckets=$(awk -F, 'NR == 2 { print $8 ":" $9 }' "$work/$name/allreduce.csv")
      expected="1:$((cuts == 15 ? 5 : 1))"
      [[ $buckets == "$expected" ]] && pass "$name: allreduce.csv overlap:buckets $buckets" ||
        fail "$name: allreduce.csv overlap:buckets $buckets, expected $expected"
      if out=$("$python" "$compare" exact "$(latest "$work/$name")" "$(latest "$work/cifar-off")" 2>&1); then
        pass "$name vs --overlap off after 20 steps: $out"
      else
        fail "$name differs from --overlap off: $out"
      fi
    done
  done
  unset CNN_CUDA_GRAPHS CNN_OVERLAP_CUTS
fi

if ((failures > 0)); then echo "gpu_overlap_test: $failures failure(s)"; exit 1; fi
echo "gpu_overlap_test: passed"
