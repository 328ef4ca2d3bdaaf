#!/usr/bin/env bash
# The timing logs of real runs (docs/LOGS.md): metrics.csv, timing.csv and allreduce.csv parse, the
# step phases add up to the measured step time within 10% (seq, threads, 2 ranks), min <= mean <= max,
# a resumed run does not repeat rows, and tools/plot-run draws them.
# Usage: timing_log_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1
source_dir=$2
binary=${CNN_BINARY:-$build/cnn_mpi}
py=/usr/bin/python3
data=/usr/share/datasets/fashion-mnist
check="$py $source_dir/tests/check_logs.py"
[[ -x $binary ]] || { echo "SKIP: $binary not built"; exit 77; }
[[ -e $data/train-images-idx3-ubyte.gz || -e $data/train-images-idx3-ubyte ]] || { echo "SKIP: no Fashion-MNIST"; exit 77; }
"$binary" --help | grep -q -- '--trace-steps' || { echo "SKIP: this cnn_mpi has no timing wiring yet (--trace-steps)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# Enough steps (40 per epoch) that per-step overheads outside the phases stay well inside 10%.
small=(--data "$data" --train-samples 4000 --test-samples 500 --filters 16 --batch 100 --quiet)

for backend in seq threads; do
  "$binary" --backend "$backend" --epochs 2 "${small[@]}" --out "$work/$backend" >"$work/$backend.log" 2>&1 ||
    { fail "$backend run: $(tail -3 "$work/$backend.log")"; continue; }
  $check "$work/$backend" 2 1 && echo "ok: $backend logs" || fail "$backend logs"
done

mpirun -np 2 --oversubscribe "$binary" --backend threads --threads 1 --epochs 2 "${small[@]}" --out "$work/np2" \
  >"$work/np2.log" 2>&1 || fail "2-rank run: $(tail -3 "$work/np2.log")"
$check "$work/np2" 2 2 && echo "ok: 2-rank logs and allreduce.csv" || fail "2-rank logs"

# Resume: 1 epoch, then --resume auto to 3 epochs in the same directory: epochs 1..3 once each.
if "$binary" --help | grep -q -- '--resume'; then
  "$binary" --backend threads --epochs 1 "${small[@]}" --out "$work/resumed" >"$work/r1.log" 2>&1 &&
    "$binary" --backend threads --epochs 3 "${small[@]}" --out "$work/resumed" --resume auto >"$work/r2.log" 2>&1 ||
    fail "resume runs: $(tail -3 "$work/r2.log")"
  $check "$work/resumed" 3 1 && echo "ok: resumed run has each epoch once" || fail "resumed logs"
else
  echo "note: no --resume in this cnn_mpi; resume check not run"
fi

if "$py" -c "import matplotlib" 2>/dev/null; then
  "$py" "$source_dir/tools/plot-run" "$work/np2" --out "$work/plots" >"$work/plot.log" 2>&1 || fail "plot-run: $(cat "$work/plot.log")"
  for png in loss accuracy phases allreduce; do
    [[ -s $work/plots/$png.png ]] && echo "ok: plot-run wrote $png.png" || fail "plot-run wrote no $png.png"
  done
else
  echo "note: no matplotlib; plot-run not checked"
fi
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all timing log checks passed"
