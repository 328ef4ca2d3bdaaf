#!/usr/bin/env bash
# The peer allreduce (label gpu; exit 77 = skipped with fewer than 2 GPUs or no peer access):
# 1. gpu_mpi_peer_allreduce under mpirun with 2 ranks, and 4 where 4 GPUs are present: every result
#    bitwise equal to the rank-order sum (sizes, unaligned sub-ranges, graph replays, broadcast).
# 2. The trainer with --allreduce peer: 2 ranks, 20 steps; --overlap on (graphs on and off, 2
#    buckets and 1) equals --overlap off BITWISE, scaling.log names the path, and the parameters
#    agree with an NCCL run to 1e-5 relative (NCCL sums in another order), as gpu_train_test holds 2 ranks to 1.
# Usage: gpu_peer_allreduce_test.sh BUILD_DIR SOURCE_DIR   (env: CNN_FASHION_DIR, PYTHON)
source "$2/tests/gpu_two_ranks_lib.sh" "$1" "$2"

require_two_gpus "the peer allreduce test"
if [[ ! -x $build/tests/gpu_mpi_peer_allreduce ]]; then
  echo "SKIP: this build has no CUDA backend ($build/tests/gpu_mpi_peer_allreduce is absent)"
  exit 77
fi

for ranks in 2 4; do
  ((gpus >= ranks)) || continue
  mpirun -np "$ranks" "$build/tests/gpu_mpi_peer_allreduce" --log_level=test_suite >"$build/peer_np$ranks.log" 2>&1
  status=$?
  if ((status == 77)); then
    echo "SKIP: $(grep -m1 SKIP "$build/peer_np$ranks.log")"
    exit 77
  fi
  ((status == 0)) && pass "gpu_mpi_peer_allreduce, $ranks ranks: $(( $(grep -c 'Leaving test case' "$build/peer_np$ranks.log") / ranks )) cases on each rank" ||
    fail "gpu_mpi_peer_allreduce, $ranks ranks: exit $status: $(grep -m3 'error' "$build/peer_np$ranks.log" | xargs)"
done

if why=$(trainer_runs_unavailable) && [[ -n $why ]]; then
  echo "SKIP (trainer part): $why"
else
  # One step per call: the allreduce runs between the steps (auto could run the seed model's steps
  # inside the persistent kernel, and its measurement could take either path in runs that must be bitwise).
  small=(--device gpu --data "$fashion" --train-samples 2000 --test-samples 500 --filters 64 --batch 100 --epochs 1
         --steps-per-launch 1 --quiet)
  run off CNN_OVERLAP_CUTS=0 -- --allreduce peer --overlap off || { echo "gpu_peer_allreduce_test: the reference run failed"; exit 1; }
  grep -q "path=peer (peer)" "$work/off/scaling.log" && pass "scaling.log: path=peer (peer)" || fail "scaling.log: $(cat "$work/off/scaling.log")"
  overlap_grid "peer " --allreduce peer
  if run nccl -- --allreduce nccl --overlap off; then
    if out=$("$python" "$compare" rel=1e-5 "$(latest "$work/nccl")" "$(latest "$work/off")" 2>&1); then
      pass "peer vs nccl after 20 steps: $out"
    else
      fail "peer differs from nccl beyond 1e-5: $out"
    fi
  fi
  run auto -- --allreduce auto --overlap auto &&
    pass "--allreduce auto: $(grep -o 'scaling advisor.*' "$work/auto.log" | head -1)"
fi

if ((failures > 0)); then echo "gpu_peer_allreduce_test: $failures failure(s)"; exit 1; fi
echo "gpu_peer_allreduce_test: passed"
