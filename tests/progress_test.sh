#!/usr/bin/env bash
# Progress output: on a terminal (a pseudo-terminal from script(1)) a live '\r'-updated line with
# step count, images/s and ETA; through a pipe only plain per-epoch lines; --quiet: no live line.
# Usage: progress_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1
binary=${CNN_BINARY:-$build/cnn_mpi}
data=/usr/share/datasets/fashion-mnist
[[ -x $binary ]] || { echo "SKIP: $binary not built"; exit 77; }
[[ -e $data/train-images-idx3-ubyte.gz || -e $data/train-images-idx3-ubyte ]] || { echo "SKIP: no Fashion-MNIST"; exit 77; }
command -v script >/dev/null || { echo "SKIP: no script(1) (util-linux)"; exit 77; }
"$binary" --help | grep -q -- '--trace-steps' || { echo "SKIP: this cnn_mpi has no progress wiring yet"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
args="--data $data --train-samples 3000 --test-samples 200 --filters 8 --batch 100 --epochs 2 --threads 1"

script -qec "$binary $args --out $work/tty" /dev/null >"$work/tty.out" 2>&1 || fail "tty run: $(tail -3 "$work/tty.out")"
"$binary" $args --out "$work/pipe" 2>&1 | cat >"$work/pipe.out" || fail "piped run"
script -qec "$binary $args --quiet --out $work/quiet" /dev/null >"$work/quiet.out" 2>&1 || fail "quiet tty run"

grep -q $'\r'"epoch 1/2  step [0-9]*/30  [0-9]* images/s  ETA" "$work/tty.out" && echo "ok: live line on a terminal" ||
  fail "no live progress line on the terminal: $(head -c 600 "$work/tty.out" | od -c | head -20)"
grep -q "^epoch 2/2 .*test_acc" "$work/pipe.out" && echo "ok: plain epoch lines through a pipe" || fail "no epoch line in the pipe"
if grep -q $'\r' "$work/pipe.out" || grep -q "ETA" "$work/pipe.out"; then fail "live line written to a pipe"; else
  echo "ok: no live line through a pipe"; fi
grep -q "ETA" "$work/quiet.out" && fail "--quiet still shows the live line" || echo "ok: --quiet has no live line"
# Under mpirun the ranks get a pseudo-terminal even when mpirun writes to a file (a SLURM log):
# plain lines there.
if command -v mpirun >/dev/null; then
  mpirun --oversubscribe -np 2 $binary $args --out "$work/mpi" >"$work/mpi.out" 2>&1 || fail "mpirun run"
  if grep -q "ETA" "$work/mpi.out"; then fail "live line under mpirun into a file"; else
    echo "ok: plain lines under mpirun into a file"; fi
  grep -q "^epoch 2/2 .*test_acc" "$work/mpi.out" || fail "no plain epoch line under mpirun"
fi
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all progress checks passed"
