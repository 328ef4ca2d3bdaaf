#!/usr/bin/env bash
# The flight recorder on GPUs (label gpu; exit 77 = skipped with fewer than 2 GPUs): 2 ranks, one per
# GPU, NCCL, the overlapped step captured as a CUDA graph (its bucket allreduces inside), 20 steps,
# --stall-timeout 2. docs/RELIABILITY.md, "Flight recorder".
#   1. rank 1 stops itself (SIGSTOP) as it enters its forward/backward of step 15: the job exits 6 with
#      one cnn_mpi line, from rank 0, naming rank 1 alone as the rank that has not reached the
#      collective rank 0 waits in; rank 0's ring (tests/check_flight.py) holds the steps' bucket
#      allreduces as queued dev_allreduce calls.
#   2. rank 1 stalls in the same place with its watchdog running (CNN_TEST_STALL): both ranks write
#      their rings, and the calls of a number are the same on both (op and bytes): the allreduces that
#      rank 0 recorded at its graph replays line up with rank 1's.
# Usage: gpu_flight_recorder_test.sh BUILD_DIR SOURCE_DIR   (env: CNN_FASHION_DIR, PYTHON)
source "$2/tests/gpu_two_ranks_lib.sh" "$1" "$2"

require_two_gpus "the GPU flight recorder test"
if grep -q 'CNN_ENABLE_CUDA:STRING=OFF' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "SKIP: this build has no CUDA backend"
  exit 77
fi
if why=$(trainer_runs_unavailable) && [[ -n $why ]]; then
  echo "SKIP: $why"
  exit 77
fi

# One step per call (the steps' collectives are what the recorder records; auto could run the seed
# model's steps inside the persistent kernel, with no host collective between them).
small=(--device gpu --data "$fashion" --train-samples 2000 --test-samples 500 --filters 64 --batch 100 --epochs 1
       --allreduce nccl --overlap on --stall-timeout 2 --steps-per-launch 1 --quiet)

# hung NAME VAR=value: the 2-rank job that rank 1's hook hangs; sets rc and line.
hung() {
  local name=$1 hook=$2
  export "${hook%%=*}=${hook#*=}"
  mpirun -np 2 -x NCCL_NVLS_ENABLE -x CNN_OVERLAP_CUTS=1 -x "${hook%%=*}" "$binary" "${small[@]}" \
    --out "$work/$name" >"$work/$name.log" 2>&1
  rc=$?
  unset "${hook%%=*}"
  line=$(grep -m1 '^cnn_mpi: error:' "$work/$name.log")
  echo "    $name: exit $rc: $line"
  [[ $rc -eq 6 ]] && pass "$name: exit 6" || fail "$name: exit $rc, expected 6"
  local lines
  lines=$(grep -c '^cnn_mpi: error:' "$work/$name.log")
  [[ $lines -eq 1 ]] && pass "$name: one cnn_mpi line" || fail "$name: $lines cnn_mpi lines"
}

hung stopped CNN_TEST_SIGSTOP=1:15:forward/backward
if [[ $line =~ ^cnn_mpi:\ error:\ rank\ 0\ on\ .*,\ in\ collective\ \#([0-9]+)\ .*:\ rank\ 1\ on\ [^\ ]*\ has\ not\ reached\ it\;\ flight\ records: ]]; then
  pass "stopped: rank 0 names rank 1 alone"
  if out=$("$python" "$source_dir/tests/check_flight.py" "$work/stopped/flight" 2 "${BASH_REMATCH[1]}" 1 0 2>&1); then
    pass "stopped: $out"
  else
    fail "stopped: the flight records: $out"
  fi
  queued=$(grep -c ' dev_allreduce .* queued ' "$work/stopped/flight/rank-0.txt")
  [[ $queued -gt 0 ]] && pass "stopped: rank 0's ring holds $queued queued dev_allreduce calls" ||
    fail "stopped: no queued dev_allreduce in rank 0's ring"
else
  fail "stopped: the line does not name rank 1 alone"
fi

hung stalled CNN_TEST_STALL=1:15:forward/backward
[[ $line =~ ^cnn_mpi:\ error:\ rank\ 1\ on\ .*\ stalled:\ no\ progress\ .*\ in\ phase\ forward/backward\ at\ global\ step\ 15\  ]] &&
  pass "stalled: rank 1 names itself" || fail "stalled: the line does not name rank 1"
if "$python" - "$work/stalled/flight" <<'EOF'; then pass "stalled: both rings agree call by call"; else fail "stalled: the rings disagree"; fi
import sys
rings = []
for rank in (0, 1):
    calls = {}
    for line in open(f"{sys.argv[1]}/rank-{rank}.txt"):
        if not line.startswith("#"):
            f = line.split(None, 8)
            calls[int(f[0])] = (f[1], f[2])
    rings.append(calls)
common = sorted(set(rings[0]) & set(rings[1]))
bad = [s for s in common if rings[0][s] != rings[1][s]]
devices = sum(1 for s in common if rings[0][s][0] == "dev_allreduce")
print(f"    {len(common)} common calls, {devices} dev_allreduce, {len(bad)} different: {bad[:5]}")
sys.exit(0 if common and devices and not bad else 1)
EOF

[[ $failures -eq 0 ]] && { echo "all checks passed"; exit 0; }
echo "$failures check(s) failed"
exit 1
