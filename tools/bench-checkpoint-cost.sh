#!/usr/bin/env bash
# The step-time cost of a checkpoint, synchronous against asynchronous (docs/CHECKPOINT.md,
# "Asynchronous checkpoints"): the seed model at d=256 (FILTERS), one epoch, with a checkpoint every
# EVERY steps and with none but the final one, on a tree from before the asynchronous checkpoint
# (BEFORE, or built from git revision BEFORE_REV) and on this one (AFTER). Rows run alternated,
# ROUNDS times. The cost of the mid-epoch checkpoints is read from each run's timing.csv as the
# epoch's `step` + `checkpoint` seconds (rank max): the steps' own time, slowed by a background write
# competing for the cores or memory bandwidth, plus what the training path spent in the checkpoints
# (sync: the whole write; async: the snapshot, and any wait for the write before). The final
# checkpoint, after the epoch's row, is in neither. Prints each run, then the medians:
#   | tree | checkpoints | steps | step+checkpoint s | ms/step | ms per checkpoint |
# where "ms per checkpoint" = (with - without) / checkpoints of that tree.
#
# Do not time on a shared machine: on a quiet node (or the GPU machine, BACKEND=cuda) only.
# Usage: [BEFORE=path/to/before/cnn_mpi | BEFORE_REV=REV] [AFTER=build/cnn_mpi] [FILTERS=256]
#        [BATCH=100] [SAMPLES=6000] [EVERY=10] [ROUNDS=3] [BACKEND=threads|seq|cuda] [THREADS=N]
#        [OPTIMIZER=momentum] [NP=1] [DATA=dir] [WORK=dir] tools/bench-checkpoint-cost.sh
#   BEFORE_REV defaults to the parent of the commit that made checkpoints asynchronous (found by its
#   subject); its tree is built once into build-bench-before-<rev>/ (CPU, or CUDA for BACKEND=cuda)
#   and reused. NP > 1 runs the ranks under mpirun --oversubscribe.
# A quick check that the script works (not a measurement):
#   FILTERS=8 SAMPLES=400 EVERY=2 ROUNDS=1 THREADS=1 tools/bench-checkpoint-cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
after=${AFTER:-build/cnn_mpi}
filters=${FILTERS:-256}
batch=${BATCH:-100}
samples=${SAMPLES:-6000}
every=${EVERY:-10}
rounds=${ROUNDS:-3}
backend=${BACKEND:-threads}
threads=${THREADS:-$(nproc)}
optimizer=${OPTIMIZER:-momentum}
np=${NP:-1}
data=${DATA:-/usr/share/datasets/fashion-mnist}
[ -x "$after" ] || { echo "bench-checkpoint-cost: $after not built (AFTER=...)" >&2; exit 2; }

# ---- the before tree ------------------------------------------------------------------------------
before=${BEFORE:-}
if [ -z "$before" ]; then
  rev=${BEFORE_REV:-}
  if [ -z "$rev" ]; then
    async=$(git log --format=%H -n1 --grep='^Asynchronous checkpoints: rank 0 snapshots the flat buffers')
    [ -n "$async" ] || { echo "bench-checkpoint-cost: cannot find the asynchronous-checkpoint commit; set BEFORE_REV or BEFORE" >&2; exit 2; }
    rev="$async^"
  fi
  short=$(git rev-parse --short=12 "$rev")
  cuda=OFF; [ "$backend" = cuda ] && cuda=ON
  tree="$repo/build-bench-before-$short"
  before="$tree/build/cnn_mpi"
  if [ ! -x "$before" ]; then
    echo "# building the before tree ($short, CUDA $cuda) in $tree"
    rm -rf "$tree/src" && mkdir -p "$tree/src"
    git archive "$short" | tar -x -C "$tree/src"  # a plain copy: the repository's worktrees stay as they are
    cmake -S "$tree/src" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DCNN_ENABLE_CUDA=$cuda -DCNN_BUILD_TESTS=OFF \
      >"$tree/configure.log" 2>&1 || { tail -20 "$tree/configure.log"; exit 1; }
    cmake --build "$tree/build" -j"$(nproc)" --target cnn_mpi >"$tree/build.log" 2>&1 || { tail -20 "$tree/build.log"; exit 1; }
  fi
fi
[ -x "$before" ] || { echo "bench-checkpoint-cost: $before not built" >&2; exit 2; }

work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${WORK:-}" ] || trap 'rm -rf "$work"' EXIT
steps=$(( (samples + batch - 1) / batch ))
checkpoints=$(( (steps - 1) / every ))  # mid-epoch ones: one due at the last step is the epoch's end's
[ "$checkpoints" -gt 0 ] || { echo "bench-checkpoint-cost: no mid-epoch checkpoint ($steps steps, EVERY=$every)" >&2; exit 2; }
launch=()
[ "$np" -gt 1 ] && launch=(mpirun --oversubscribe -np "$np")
common=(--model seed --filters "$filters" --batch "$batch" --optimizer "$optimizer" --backend "$backend"
        --data "$data" --epochs 1 --train-samples "$samples" --test-samples 100 --keep 2 --quiet)
[ "$backend" = cuda ] || common+=(--threads "$threads")

echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)$(
  command -v nvidia-smi >/dev/null && [ "$backend" = cuda ] && echo ", $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)")"
echo "# before: $before; after: $after"
echo "# d=$filters, batch $batch, $steps steps, $optimizer, backend $backend, $np rank(s); with: a checkpoint every $every steps ($checkpoints mid-epoch); without: the final one only"
echo "tree checkpoints round step_s checkpoint_s"
for round in $(seq 1 "$rounds"); do
  for tree in before after; do
    binary=$before; [ "$tree" = after ] && binary=$after
    for mode in without with; do
      schedule=(--checkpoint-every 0); [ "$mode" = with ] && schedule+=(--checkpoint-every-steps "$every")
      rm -rf "$work/run"
      "${launch[@]}" "$binary" "${common[@]}" "${schedule[@]}" --out "$work/run" >"$work/log" 2>&1 ||
        { cat "$work/log"; exit 1; }
      step=$(awk -F, '$1 == 1 && $2 == "step" { print $5 }' "$work/run/timing.csv")
      ckpt=$(awk -F, '$1 == 1 && $2 == "checkpoint" { print $5 }' "$work/run/timing.csv")
      echo "$tree $mode $round $step $ckpt" | tee -a "$work/all"
    done
  done
done

median() {  # TREE MODE: the median of step + checkpoint seconds
  awk -v t="$1" -v m="$2" '$1 == t && $2 == m { print $4 + $5 }' "$work/all" | sort -g |
    awk '{ v[++k] = $1 } END { printf "%.4f", (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2 }'
}
echo
echo "| tree | checkpoints | steps | step+checkpoint s (median) | ms/step | ms per checkpoint |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for tree in before after; do
  without=$(median "$tree" without)
  with=$(median "$tree" with)
  echo "| $tree | 0 | $steps | $without | $(awk -v s="$without" -v n="$steps" 'BEGIN { printf "%.3f", 1e3 * s / n }') | |"
  echo "| $tree | $checkpoints | $steps | $with | $(awk -v s="$with" -v n="$steps" 'BEGIN { printf "%.3f", 1e3 * s / n }') |" \
       "$(awk -v a="$with" -v b="$without" -v c="$checkpoints" 'BEGIN { printf "%.2f", 1e3 * (a - b) / c }') |"
done
