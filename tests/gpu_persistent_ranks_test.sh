#!/usr/bin/env bash
# The persistent seed kernel on 2 ranks (RANKS=4: 4), one GPU each (label gpu; exit 77 = skipped with
# fewer GPUs, or where the GPUs have no peer access): each step's gradient is summed over the ranks
# INSIDE the kernel through peer memory (kernels/ops/seed_persistent_exchange.cuh). Global batch 200
# (100 or 50 per rank), momentum:
#   1. the settings line says so, and two runs give the same bits;
#   2. the ranks agree with 1 rank of the same global batch, and with the ranks taking one step per launch
#      (NCCL or peer allreduce between the steps), within a relative norm of 1e-4 after 10 steps;
#   3. a resume from a mid-epoch checkpoint, and a stop by CNN_TEST_STOP_AFTER_STEPS (exit 5) and its
#      resume, end bitwise as the uninterrupted run;
#   4. a SIGTERM to rank 1 alone stops every rank at the same step (the stop word travels with the
#      in-kernel exchange: a rank that ran on would wait for the other forever), with exit 5 and a
#      checkpoint whose resume ends bitwise as the uninterrupted run;
#   5. CNN_TEST_NAN_AT=0:5: the divergence line naming rank 0, exit 4;
#   6. auto: every rank times both paths and the slowest rank's times decide, so all take the same one
#      (ranks on different paths would pair mismatched exchanges and hang until the time limit): the run
#      completes, its line names the path with both times, the one it measured no slower, and after 10
#      steps its bits are those of that path given explicitly (--steps-per-launch 600 or 1);
#   7. a rank stopped (SIGSTOP) as it begins its chunk: the others wait inside the kernel's exchange,
#      where their host sees no step finish; the watchdog sees the silence within --stall-timeout
#      plus the waiting phase's grace (the kernel counts its steps into a host word), where it allowed
#      one timeout per step of the chunk before: exit 6 in seconds, naming the chunk's phase.
# Usage: gpu_persistent_ranks_test.sh BUILD_DIR SOURCE_DIR   (env: RANKS, CNN_FASHION_DIR, PYTHON)
source "$2/tests/gpu_two_ranks_lib.sh" "$1" "$2"
skip_unless_gpu_runs h5py
require_two_gpus "the persistent kernel's in-kernel exchange"
n=${RANKS:-2}
if ((gpus < n)); then
  echo "SKIP: RANKS=$n needs $n GPUs (nvidia-smi lists $gpus)"
  exit 77
fi

# ranks NAME N [VAR=value...] -- [options...]: N ranks of the trainer (under a time limit: a rank
# left waiting for its peer would hang), its output in $work/NAME.log; sets rc.
ranks() {
  local name=$1 n=$2
  shift 2
  local envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=(-x "$1"); export "${1%%=*}=${1#*=}"; shift; done
  shift
  timeout 300 mpirun -np "$n" -x NCCL_NVLS_ENABLE "${envs[@]}" "$binary" "$@" --out "$work/$name" >"$work/$name.log" 2>&1
  rc=$?
  for each in "${envs[@]}"; do [[ $each != -x ]] && unset "${each%%=*}"; done
}
expect_rc() {  # NAME EXPECTED
  if [[ $rc -eq $2 ]]; then pass "$1: exit $rc"; else fail "$1: exit $rc, expected $2: $(tail -3 "$work/$1.log" | xargs)"; fi
}

# 6000 images: 30 steps an epoch, a checkpoint every 7 steps.
base=(--device gpu --backend cuda --data "$fashion" --test-samples 1000 --batch 200 --optimizer momentum --quiet)
seed=("${base[@]}" --train-samples 6000 --epochs 2 --checkpoint-every-steps 7 --keep 20 --steps-per-launch 600)

# 1.
ranks two "$n" -- "${seed[@]}"
expect_rc two 0
if grep -q "steps_per_launch: 1 ($n ranks: no exchange inside the persistent kernel" "$work/two.log"; then
  echo "SKIP: $(grep -o 'no exchange inside the persistent kernel.*' "$work/two.log" | head -1)"
  exit 77
elif grep -q "steps_per_launch: up to 30 (persistent kernel, the gradients summed over the ranks inside it)" "$work/two.log"; then
  pass "$n ranks: the steps run in the persistent kernel, with the exchange inside it"
else
  fail "$n ranks: settings say $(grep steps_per_launch "$work/two.log" | xargs)"
  echo "gpu_persistent_ranks_test: the in-kernel exchange did not run; the rest would test nothing"
  exit 1
fi
ranks two-again "$n" -- "${seed[@]}"
same "$n ranks: two runs" exact two two-again

# 2. After 10 steps (2000 images, one epoch).
ten=("${base[@]}" --train-samples 2000 --epochs 1)
ranks ten-two "$n" -- "${ten[@]}" --steps-per-launch 600
ranks ten-one 1 -- "${ten[@]}" --steps-per-launch 600
ranks ten-two-1 "$n" -- "${ten[@]}" --steps-per-launch 1
grep -q "steps_per_launch: up to 10 (persistent kernel)" "$work/ten-one.log" ||
  fail "1 rank: settings say $(grep steps_per_launch "$work/ten-one.log" | xargs)"
same "$n ranks vs 1 rank, global batch 200, after 10 steps" relnorm=1e-4 ten-two ten-one
same "$n ranks in the kernel vs one step per launch, after 10 steps" relnorm=1e-4 ten-two ten-two-1

# 6. auto, measured on every rank.
ranks ten-auto "$n" -- "${ten[@]}"
expect_rc ten-auto 0
auto_choice "$n ranks" "$work/ten-auto.log" 10
if [[ $taken == kernel ]]; then
  same "$n ranks: auto (the kernel, measured faster) vs --steps-per-launch 600" exact ten-two ten-auto
elif [[ $taken == loop ]]; then
  same "$n ranks: auto (one launch per step, measured faster) vs --steps-per-launch 1" exact ten-two-1 ten-auto
fi

# 3. A resume from the first mid-epoch checkpoint of epoch 2; a stop hook in epoch 2 and its resume.
mid=$(cd "$work/two/checkpoints" && ls ckpt-e0001-*.h5 | head -1)
mkdir -p "$work/mid/checkpoints"
cp "$work/two/checkpoints/$mid" "$work/mid/checkpoints/"
ranks mid "$n" -- "${seed[@]}" --resume auto
expect_rc mid 0
same "$n ranks: resume from $mid vs uninterrupted" exact two mid
ranks stop "$n" CNN_TEST_STOP_AFTER_STEPS=41 -- "${seed[@]}"
expect_rc stop 5
ranks stop "$n" -- "${seed[@]}" --resume auto
expect_rc stop 0
same "$n ranks: stop after 41 steps + resume vs uninterrupted" exact two stop

# 4. SIGTERM to rank 1 only, after the first epoch's row.
long=("${base[@]}" --epochs 20 --steps-per-launch 600)
ranks long-ref "$n" -- "${long[@]}"
timeout 300 mpirun -np "$n" -x NCCL_NVLS_ENABLE "$binary" "${long[@]}" --out "$work/long-sig" >"$work/long-sig.log" 2>&1 &
launcher=$!
for _ in $(seq 1000); do [[ $(wc -l <"$work/long-sig/metrics.csv" 2>/dev/null || echo 0) -ge 2 ]] && break; sleep 0.02; done
target=""
for pid in $(pgrep -f -- "--out $work/long-sig"); do
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && target=$pid
done
if [[ -z $target ]]; then
  fail "SIGTERM: rank 1's process not found"
else
  kill -TERM "$target"
fi
wait "$launcher"
rc=$?
if [[ $rc -eq 5 ]]; then
  pass "SIGTERM to rank 1: all $n ranks stopped, exit 5: $(grep -m1 '^stopped by' "$work/long-sig.log")"
  ranks long-sig "$n" -- "${long[@]}" --resume auto
  expect_rc long-sig 0
  same "SIGTERM to rank 1 + resume vs uninterrupted" exact long-ref long-sig
elif [[ $rc -eq 0 ]]; then
  echo "skip - SIGTERM came after the run's end"
else
  fail "SIGTERM to rank 1: exit $rc: $(tail -3 "$work/long-sig.log" | xargs)"
fi

# 5.
ranks nan "$n" CNN_TEST_NAN_AT=0:5 -- "${seed[@]}"
expect_rc nan 4
grep -q "global step 5 (1-based), layer fc.bias, rank(s) 0;" "$work/nan.log" &&
  pass "NaN in step 5 on rank 0: $(grep -o 'training diverged: non-finite gradient in global step 5[^;]*' "$work/nan.log")" ||
  fail "NaN in step 5: $(grep -m2 -i 'diverged\|error' "$work/nan.log" | xargs)"

# 7. Rank 1 stops itself (CNN_TEST_SIGSTOP) as it enters its first chunk (global step 1, 30 steps an
# epoch): rank 0 runs its own chunk and waits in step 1's exchange inside the kernel. With
# --stall-timeout 2 its watchdog fires after 2 s plus the 5 s grace; before, the chunk's phase allowed
# 30 timeouts (60 s).
started=$(date +%s)
ranks stopped "$n" "CNN_TEST_SIGSTOP=1:1:steps in one launch, exchanging with the other ranks" -- \
  "${seed[@]}" --stall-timeout 2
took=$(($(date +%s) - started))
line=$(grep -m1 "^cnn_mpi: error: rank" "$work/stopped.log")
if [[ $rc -eq 6 && $took -lt 40 && $line == *"in phase steps in one launch, exchanging with the other ranks at global step 1"* ]]; then
  pass "rank 1 stopped as its chunk began: exit 6 after ${took} s: ${line#cnn_mpi: error: }"
else
  fail "rank 1 stopped as its chunk began: exit $rc after ${took} s: ${line:-$(tail -3 "$work/stopped.log" | xargs)}"
fi

if ((failures > 0)); then echo "gpu_persistent_ranks_test: $failures failure(s)"; exit 1; fi
echo "gpu_persistent_ranks_test: passed"
