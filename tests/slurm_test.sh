#!/usr/bin/env bash
# slurm_test.sh BUILD_DIR SOURCE_DIR: the job scripts in jobs/ on a real SLURM cluster.
#
# Starts a private one-node cluster on localhost (tools/slurm/start-cluster.sh: munged, slurmctld,
# slurmd, all started here and stopped here by PID, also on failure), then:
#  (a) jobs/train-cpu.sbatch, installed by `cmake --install` and submitted from the prefix without
#      CNN_BIN, so that it must find the installed cnn_mpi itself; 2 tasks x 1 CPU on a small
#      Fashion-MNIST run: exit code 0, the installed binary on the launch line, both
#      ranks in the job's output, 2 sane rows in metrics.csv;
#  (b) for each launcher (srun --mpi=pmix, mpirun): jobs/train-preemptible.sbatch, signalled with
#      `scancel -b -s USR1` while it trains: the trainer must checkpoint and exit 5, the job must
#      requeue itself, resume from that checkpoint on its second start (SLURM_RESTART_COUNT=1),
#      finish with exit code 0, and end with parameters bitwise equal to an uninterrupted run;
#  (c) the single-rank mode against a launch MPI did not wire up: plain cnn_mpi under salloc (no
#      step) trains; `srun -n 2 --mpi=none` gives each task a world of one rank, and each stops with
#      one line and exit code 2 before it writes anything;
#  (d) stops the daemons.
# Skipped (exit 77) only where SLURM cannot be installed or run (no root, apt fails). Needs about
# 1.5 minutes on 2 idle cores. Knobs: SLURM_TEST_LAUNCHERS (default "srun mpirun"),
# SLURM_TEST_KEEP=1 keeps the work directory even on success.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 2
fi
BUILD_DIR=$(cd "$1" && pwd)
SOURCE_DIR=$(cd "$2" && pwd)
BIN=${CNN_BINARY:-$BUILD_DIR/cnn_mpi}
DATA=/usr/share/datasets/fashion-mnist
LAUNCHERS=${SLURM_TEST_LAUNCHERS:-srun mpirun}
# Debian's python3 has h5py (python3-h5py); a python3 earlier on PATH (pyenv) may not.
PY=/usr/bin/python3

TEST_NAME=slurm_test
# shellcheck source-path=SCRIPTDIR source=slurm_test_lib.sh
source "$SOURCE_DIR/tests/slurm_test_lib.sh"

[[ $(id -u) -eq 0 ]] || skip "needs root to run munged and slurmd (CI runs as root)"
[[ -x $BIN ]] || fail "no cnn_mpi at $BIN (build first, or set CNN_BINARY)"
if [[ ! -d $DATA ]] || ! "$PY" -c 'import h5py' 2>/dev/null; then
  say "Fashion-MNIST or python3-h5py missing: tools/install-deps.sh --with-slurm"
  bash "$SOURCE_DIR/tools/install-deps.sh" --with-slurm || skip "tools/install-deps.sh --with-slurm failed"
fi
[[ -d $DATA ]] || fail "$DATA still missing after install-deps"

# A test run inside someone's allocation must not hand that allocation's variables to the jobs
# (or to the DRY_RUN lines) of the private cluster.
while read -r name; do unset "$name"; done < <(compgen -e | grep '^SLURM_' | grep -vx 'SLURM_CONF')

# mpirun refuses root without these (CTest sets them; a hand run may not).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

WORK=$(mktemp -d /tmp/cnn-slurm-test.XXXXXX)
chmod 0755 "$WORK"   # munged's socket lives below it and must be reachable by all
CLUSTER=$WORK/cluster
REF_PID=""
cluster_started=0

on_exit() {
  local rc=$?
  set +e
  trap - EXIT
  # The reference run is the only process this script starts besides the cluster.
  if [[ -n $REF_PID ]] && kill -0 "$REF_PID" 2>/dev/null; then kill "$REF_PID"; wait "$REF_PID"; fi
  if [[ $rc -ne 0 && $rc -ne 77 && $cluster_started == 1 ]]; then
    say "---- job queue"
    squeue 2>&1
    for f in "$CLUSTER"/log/slurmctld.log "$CLUSTER"/log/slurmd.log; do
      say "---- $f (last 60 lines)"
      tail -n 60 "$f" 2>&1
    done
  fi
  if [[ $cluster_started == 1 || -s $CLUSTER/pids ]]; then
    "$SOURCE_DIR/tools/slurm/stop-cluster.sh" "$CLUSTER" || { say "stop-cluster.sh failed"; rc=1; }
  fi
  if [[ $rc -eq 0 && ${SLURM_TEST_KEEP:-0} != 1 ]]; then
    rm -rf "$WORK"
  else
    say "work directory kept: $WORK"
  fi
  say "done (exit $rc)"
  exit "$rc"
}
trap on_exit EXIT

# --------------------------------------------------- (0) DRY_RUN launch lines, outside SLURM
# What DRY_RUN=1 prints for a GPU machine without SLURM (the line a lead runs by hand there), and
# a CPU line that is then run as printed.
say "(0) DRY_RUN launch lines"
expect_line() {  # DESCRIPTION EXPECTED-SUBSTRING LINE
  [[ $3 == *"$2"* ]] || fail "(0) $1: expected '$2' in: $3"
}
line=$(DRY_RUN=1 LAUNCHER=mpirun GPUS_PER_NODE=2 CNN_BIN=$BIN NCCL_SOCKET_IFNAME='^docker,lo' \
  NCCL_IB_HCA='=mlx5_0:1' bash "$SOURCE_DIR/jobs/train-gpu.sbatch" --quiet)
say "gpu, mpirun: $line"
expect_line "gpu/mpirun" "mpirun -np 2 --map-by ppr:2:node --bind-to none" "$line"
expect_line "gpu/mpirun" "-x NCCL_NVLS_ENABLE=0" "$line"
# Every NCCL_* variable reaches ranks on other nodes (docs/SLURM.md, "Multi-node GPU jobs").
expect_line "gpu/mpirun" "-x NCCL_IB_HCA==mlx5_0:1" "$line"
expect_line "gpu/mpirun" "-x NCCL_SOCKET_IFNAME=\\^docker\\,lo" "$line"
expect_line "gpu/mpirun" "--device gpu --quiet" "$line"
line=$(DRY_RUN=1 GPUS_PER_NODE=4 CNN_NODES=2 CNN_BIN=$BIN bash "$SOURCE_DIR/jobs/train-gpu.sbatch")
say "gpu, srun: $line"
expect_line "gpu/srun" "env NCCL_NVLS_ENABLE=0" "$line"
expect_line "gpu/srun" "srun --mpi=pmix -n 8 --ntasks-per-node=4 --gpus-per-node=4" "$line"
line=$(DRY_RUN=1 CNN_BIN=$BIN CNN_OUT=$WORK/run-x bash "$SOURCE_DIR/jobs/train-preemptible.sbatch")
expect_line "preemptible" "--resume auto" "$line"
line=$(DRY_RUN=1 LAUNCHER=mpirun CNN_BIN=$BIN CNN_OUT=$WORK/run-dry CNN_EPOCHS=1 CNN_FILTERS=8 \
  CNN_TRAIN_SAMPLES=1000 CNN_TEST_SAMPLES=200 bash "$SOURCE_DIR/jobs/train-cpu.sbatch" --quiet)
say "cpu, mpirun: $line"
expect_line "cpu/mpirun" "mpirun -np 2 --map-by slot:PE=1 --bind-to core" "$line"
# --oversubscribe: a CI runner may show mpirun fewer slots than 2.
rc=0
eval "${line/mpirun -np 2/mpirun -np 2 --oversubscribe}" >"$WORK/dry-run.out" 2>&1 || rc=$?
((rc == 0)) || { show_output "$WORK/dry-run.out"; fail "(0) the printed cpu/mpirun line exited with $rc"; }
check_metrics "$WORK/run-dry/metrics.csv" 1 0.3 || fail "(0) metrics of the printed line's run"

# ------------------------------------------------------------------------------------ the cluster
say "starting the cluster in $CLUSTER"
start_rc=0
"$SOURCE_DIR/tools/slurm/start-cluster.sh" "$CLUSTER" || start_rc=$?
((start_rc == 77)) && skip "SLURM cannot be installed here (tools/install-deps.sh --with-slurm failed)"
((start_rc == 0)) || fail "tools/slurm/start-cluster.sh failed (exit $start_rc)"
cluster_started=1
# shellcheck source=/dev/null
source "$CLUSTER/env.sh"
export CNN_BIN=$BIN CNN_DATA=$DATA CNN_DATASET=fashion

# ------------------------------------------------------------------------ (a) 2-rank CPU job
PREFIX=$WORK/prefix
cmake --install "$BUILD_DIR" --prefix "$PREFIX" >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; fail "cmake --install"; }
say "(a) $PREFIX/share/cnn_mpi/jobs/train-cpu.sbatch (installed), -n 2 --cpus-per-task=1, 2 epochs"
id=$(cd "$WORK" && env -u CNN_BIN "CNN_OUT=$WORK/run-cpu" CNN_EPOCHS=2 CNN_FILTERS=8 CNN_BATCH=100 \
  CNN_TRAIN_SAMPLES=3000 CNN_TEST_SAMPLES=500 sbatch --parsable -n 2 --cpus-per-task=1 -o "$WORK/cpu-%j.out" \
  "$PREFIX/share/cnn_mpi/jobs/train-cpu.sbatch")
rc=0
wait_job "$id" 120 || rc=$?
out=$WORK/cpu-$id.out
((rc == 0)) || { show_output "$out"; fail "(a) job $id exit code $rc, expected 0"; }
grep -qF "$PREFIX/bin/cnn_mpi train" "$out" || { show_output "$out"; fail "(a) the job did not run $PREFIX/bin/cnn_mpi"; }
if ! grep -q 'rank 0/2 ' "$out" || ! grep -q 'rank 1/2 ' "$out"; then
  show_output "$out"
  fail "(a) output does not name ranks 0/2 and 1/2"
fi
grep -q "slurm_job: $id" "$out" || { show_output "$out"; fail "(a) the trainer did not log the job id $id"; }
check_metrics "$WORK/run-cpu/metrics.csv" 2 0.5 || { show_output "$out"; fail "(a) metrics.csv"; }
say "(a) passed: job $id"

# ------------------------------------------------- (b) preemption: signal, checkpoint, requeue
# 6 epochs of 10000 images in 100-image steps (600 steps): long enough to still be training
# when the signal comes after epoch 1, short enough for CI. A checkpoint every 40 steps as well.
small_run=(--epochs 6 --filters 8 --batch 100 --train-samples 10000 --test-samples 500 --seed 7)
export CNN_EPOCHS=6 CNN_FILTERS=8 CNN_BATCH=100 CNN_TRAIN_SAMPLES=10000 CNN_TEST_SAMPLES=500 \
  CNN_SEED=7 CNN_CHECKPOINT_EVERY_STEPS=40

# The uninterrupted reference: same settings, 2 ranks, 1 thread each, run straight with mpirun.
# It starts while the first preempted job waits to be requeued, when the CPUs are idle.
start_reference() {
  say "reference run (mpirun -np 2, uninterrupted) in the background"
  mpirun -np 2 --oversubscribe --bind-to none "$BIN" train --data "$DATA" --dataset fashion \
    "${small_run[@]}" --threads 1 --out "$WORK/run-reference" >"$WORK/reference.out" 2>&1 &
  REF_PID=$!
}

preemption_cycle() {
  local launcher=$1 run=$WORK/run-preempt-$1
  say "(b) jobs/train-preemptible.sbatch with LAUNCHER=$launcher"
  local id out rc
  # CNN_TEST_STEP_DELAY_MS (test hook, timing only): 5 ms a step, so that 6 epochs take seconds and the
  # signal sent after the first epoch's row finds the run training (undelayed, it could finish all 6
  # epochs in 0.5 s, between two looks of the loop below).
  id=$(CNN_TEST_STEP_DELAY_MS=5 LAUNCHER=$launcher CNN_OUT=$run sbatch --parsable -n 2 --cpus-per-task=1 \
    -o "$WORK/preempt-$launcher-%j.out" "$SOURCE_DIR/jobs/train-preemptible.sbatch")
  out=$WORK/preempt-$launcher-$id.out

  # Training for real: the first epoch's row is in metrics.csv (so the signal handlers are up).
  local deadline=$((SECONDS + 120))
  until [[ -s $run/metrics.csv && $(wc -l <"$run/metrics.csv") -ge 2 ]]; do
    ((SECONDS < deadline)) || { show_output "$out"; fail "(b/$launcher) job $id not training after 120 s (state $(job_state "$id"))"; }
    [[ $(job_state "$id") =~ ^(PENDING|RUNNING|CONFIGURING)$ ]] || { show_output "$out"; fail "(b/$launcher) job $id ended early: $(job_state "$id")"; }
    sleep 0.5
  done
  say "(b/$launcher) job $id is training (epoch 1 done): scancel -b -s USR1 $id"
  scancel -b -s USR1 "$id"

  # The first start ends by requeueing; the checkpoint it wrote is the newest one until the second
  # start (>= 11 s later, per cred_expire and the scheduler's interval) writes more.
  deadline=$((SECONDS + 60))
  until grep -q "requeueing job $id" "$out" 2>/dev/null; do
    ((SECONDS < deadline)) || { show_output "$out"; fail "(b/$launcher) job $id did not requeue itself within 60 s of the signal"; }
    [[ $(job_state "$id") =~ ^(RUNNING|COMPLETING|REQUEUED|PENDING)$ ]] || { show_output "$out"; fail "(b/$launcher) job $id: $(job_state "$id") instead of a requeue"; }
    sleep 0.5
  done
  local stopped_at
  stopped_at=$(cat "$run/checkpoints/latest")
  say "(b/$launcher) requeued after the trainer stopped with checkpoint $stopped_at"
  grep -q 'trainer exit code 5' "$out" || { show_output "$out"; fail "(b/$launcher) the first start did not end with exit code 5"; }
  [[ $stopped_at =~ ^ckpt-e000[0-5]-s[0-9]{8}\.h5$ ]] || fail "(b/$launcher) latest checkpoint after the stop is '$stopped_at', expected one before epoch 6"
  [[ -f $run/checkpoints/$stopped_at ]] || fail "(b/$launcher) $run/checkpoints/$stopped_at missing"

  if [[ -z $REF_PID && ! -f $WORK/run-reference/checkpoints/latest ]]; then start_reference; fi

  rc=0
  wait_job "$id" 240 || rc=$?
  ((rc == 0)) || { show_output "$out"; fail "(b/$launcher) job $id exit code $rc, expected 0"; }
  grep -q 'SLURM_RESTART_COUNT=1' "$out" || { show_output "$out"; fail "(b/$launcher) no second start (SLURM_RESTART_COUNT=1) in $out"; }
  grep -q 'slurm_restart_count: 1' "$out" || { show_output "$out"; fail "(b/$launcher) the trainer did not log restart count 1"; }
  # Resumed, not restarted: epoch 1 trained once, and the second start named the checkpoint.
  local firsts
  firsts=$(grep -c '^epoch 1/6 ' "$out" || true)
  ((firsts == 1)) || { show_output "$out"; fail "(b/$launcher) epoch 1 trained $firsts times: not resumed"; }
  [[ $(wc -l <"$run/runs.log") -eq 2 ]] || { cat "$run/runs.log"; fail "(b/$launcher) runs.log should hold 2 starts"; }
  grep -q "restart=1, .*resumed_from=.*$stopped_at" "$run/runs.log" ||
    { cat "$run/runs.log"; fail "(b/$launcher) runs.log: the second start did not resume from $stopped_at"; }
  check_metrics "$run/metrics.csv" 6 0.6 || { show_output "$out"; fail "(b/$launcher) metrics.csv"; }

  if [[ -n $REF_PID ]]; then
    rc=0
    wait "$REF_PID" || rc=$?
    REF_PID=""
    ((rc == 0)) || { show_output "$WORK/reference.out"; fail "reference run exit code $rc"; }
  fi
  local final reference
  final=$run/checkpoints/$(cat "$run/checkpoints/latest")
  reference=$WORK/run-reference/checkpoints/$(cat "$WORK/run-reference/checkpoints/latest")
  compare_models "$final" "$reference" || fail "(b/$launcher) final parameters differ from the uninterrupted run"
  say "(b/$launcher) passed: job $id stopped at $stopped_at, requeued, resumed, equal to the reference"
}

for launcher in $LAUNCHERS; do
  preemption_cycle "$launcher"
done

# --------------------------------------- (c) single-rank mode, and a world of one per srun task
say "(c) plain cnn_mpi under salloc -n 2: the single-rank mode"
lone_run=(train --data "$DATA" --dataset fashion --epochs 1 --filters 4 --train-samples 500 --test-samples 100)
rc=0
salloc -n 2 "$BIN" "${lone_run[@]}" --out "$WORK/run-salloc" >"$WORK/salloc.out" 2>&1 || rc=$?
((rc == 0)) || { show_output "$WORK/salloc.out"; fail "(c) salloc -n 2 cnn_mpi: exit code $rc, expected 0"; }
grep -q 'rank 0/1 ' "$WORK/salloc.out" || { show_output "$WORK/salloc.out"; fail "(c) salloc: not one rank"; }
check_metrics "$WORK/run-salloc/metrics.csv" 1 0.1 || fail "(c) salloc: metrics.csv"

say "(c) srun -n 2 --mpi=none: each task a world of one rank, refused"
# Debian's Open MPI notices a direct launch without PMI by itself (it looks for SLURM_NODELIST) and
# aborts in MPI_Init; an MPI that does not look starts a singleton in each task. Hiding the node
# list from it makes this one do the same, while SLURM_STEP_ID and the step's task count stay.
rc=0
srun -n 2 --mpi=none bash -c 'unset SLURM_NODELIST; exec "$@"' lone "$BIN" "${lone_run[@]}" --out "$WORK/run-lone" \
  >"$WORK/lone.out" 2>&1 || rc=$?
((rc == 2)) || { show_output "$WORK/lone.out"; fail "(c) srun --mpi=none: exit code $rc, expected 2"; }
refusals=$(grep -c '^cnn_mpi: error: srun started 2 tasks in this step (SLURM_STEP_ID=[0-9]*, SLURM_STEP_NUM_TASKS=2), .*srun --mpi=pmix' "$WORK/lone.out" || true)
((refusals == 2)) || { show_output "$WORK/lone.out"; fail "(c) srun --mpi=none: $refusals refusal lines, expected one per task"; }
[[ ! -e $WORK/run-lone ]] || fail "(c) srun --mpi=none: a refused task created its run directory"
say "(c) passed"

say "all passed in $((SECONDS - T0)) s"
