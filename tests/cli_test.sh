#!/usr/bin/env bash
# The command line: --help and --version, and every bad value rejected with exit code 2 (3 for I/O)
# and exactly one line on stderr, before any training starts.
# Usage: cli_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1
binary=${CNN_BINARY:-$build/cnn_mpi}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect CODE PATTERN -- ARGS...: runs cnn_mpi, checks the exit code, one stderr line matching PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 3
  "$@" >"$work/out" 2>"$work/err"
  local got=$?
  # Under mpirun, mpirun adds its own banner; count only cnn_mpi's lines there.
  local lines
  if [[ $1 == mpirun ]]; then lines=$(grep -c '^cnn_mpi:' "$work/err"); else lines=$(grep -c . "$work/err"); fi
  if [[ $got -ne $code ]]; then fail "$* -> exit $got, expected $code ($(head -c 300 "$work/err"))"; return; fi
  if [[ $code -ne 0 && $lines -ne 1 ]]; then fail "$* -> $lines stderr lines, expected 1: $(cat "$work/err")"; return; fi
  if ! grep -qE -- "$pattern" "$work/err" "$work/out"; then fail "$* -> output lacks /$pattern/: $(cat "$work/err")"; return; fi
  echo "ok: exit $got: $*"
}

small=(--train-samples 200 --test-samples 100 --filters 4 --epochs 1 --quiet)
expect 0 "--batch" -- "$binary" --help
expect 0 "default|\[" -- "$binary" --help
expect 0 "cnn_mpi [0-9]+\.[0-9]+" -- "$binary" --version
for option in --batch --epochs --filters; do
  expect 2 "$option must be at least 1" -- "$binary" "$option" 0
  expect 2 "$option must be at least 1" -- "$binary" "$option" -5
  expect 2 "$option" -- "$binary" "$option" abc
done
expect 2 "--lr must be a positive number" -- "$binary" --lr 0
expect 2 "--lr must be a positive number" -- "$binary" --lr -0.1
expect 2 "--lr must be a positive number" -- "$binary" --lr nan
expect 2 "--momentum must be in" -- "$binary" --momentum 1.5
expect 2 "unknown backend 'gpu2'" -- "$binary" --backend gpu2
expect 2 "unknown device 'tpu'" -- "$binary" --device tpu
expect 2 "unknown data set 'cifar100'" -- "$binary" --dataset cifar100
expect 2 "unknown optimizer 'rmsprop'" -- "$binary" --optimizer rmsprop
expect 2 "--threads must be" -- "$binary" --threads -1
expect 2 "does not run on --device cpu" -- "$binary" --device cpu --backend cuda
expect 2 "does not run on --device gpu" -- "$binary" --device gpu --backend seq
expect 2 "--filters must be at most" -- "$binary" --filters 100000
expect 2 "The following argument was not expected|unexpected|not expected" -- "$binary" --no-such-option
expect 2 "--train-samples" -- "$binary" --train-samples -3
expect 2 "--optimizer: unknown optimizer 'adagrad' \\(available: sgd, momentum, adam, adamw\\)" -- "$binary" --optimizer adagrad
expect 2 "--beta2 must be in" -- "$binary" --optimizer adam --beta2 1
expect 2 "--eps must be a positive number" -- "$binary" --optimizer adam --eps 0
expect 3 "$work/missing: data directory does not exist" -- "$binary" --data "$work/missing" "${small[@]}"
# --model: a bad spec is found at start-up (shapes need the data's image size), one line naming the token.
if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  expect 2 "^cnn_mpi: error: --model 'conv3x3:8 relu conv3x3:0 fc:10': token 3 'conv3x3:0': the filter count must be at least 1" \
    -- "$binary" --model 'conv3x3:8 relu conv3x3:0 fc:10' "${small[@]}" --out "$work/m1"
  expect 2 "token 2 'maxpool30': a 30x30 window does not fit its 8x26x26 input" \
    -- "$binary" --model 'conv3x3:8 maxpool30 fc:10' "${small[@]}" --out "$work/m2"
  expect 2 "token 1 'conv3x3:8': the last layer must be fc:10" -- "$binary" --model conv3x3:8 "${small[@]}" --out "$work/m3"
  expect 2 "--model cifar2 = |token 1 'cifar2': unknown layer" -- "$binary" --model cifar2 "${small[@]}" --out "$work/m4"
  if [[ -e $work/m1 || -e $work/m2 ]]; then fail "a refused --model created its run directory"; fi
else
  echo "skip: --model checks need /usr/share/datasets/fashion-mnist"
fi
mkdir -p "$work/bad"
for name in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  printf 'not an idx file at all' >"$work/bad/$name"
done
expect 2 "$work/bad/(train|t10k)-(images|labels)" -- "$binary" --data "$work/bad" "${small[@]}"
expect 3 "not writable|cannot create|Not a directory|not a directory" -- "$binary" --out /proc/cnn_mpi_run "${small[@]}"
touch "$work/a_file"
expect 3 "a_file" -- "$binary" --out "$work/a_file/run" "${small[@]}"

# A run directory that holds a run is never overwritten.
if "$binary" --out "$work/run" "${small[@]}" >/dev/null 2>&1; then
  before=$(md5sum "$work/run/metrics.csv")
  expect 2 "already holds a run" -- "$binary" --out "$work/run" "${small[@]}"
  [[ $(md5sum "$work/run/metrics.csv") == "$before" ]] || fail "metrics.csv of an earlier run changed"
else
  fail "a small run did not complete"
fi

# SLURM's variables without a step (a batch script's shell, salloc) leave the single-rank mode alone;
# an srun step of several tasks with a world of one is refused (tests/bad_input/85_launcher.cases).
expect 0 "epoch 1/1" -- env SLURM_JOB_ID=7 SLURM_NTASKS=4 SLURM_NPROCS=4 "$binary" --out "$work/batch-shell" "${small[@]}"
expect 0 "epoch 1/1" -- env SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=1 "$binary" --out "$work/one-task-step" "${small[@]}"

# Under MPI: a global batch smaller than the number of ranks, reported once.
if command -v mpirun >/dev/null; then
  # mpirun chose the world (OMPI_COMM_WORLD_SIZE=1), even inside a step of 4 tasks: allowed.
  expect 0 "epoch 1/1" -- env SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=4 mpirun -np 1 "$binary" --out "$work/mpirun-in-step" "${small[@]}"
  expect 2 "--batch 3 is smaller than the number of ranks \(4\)" -- mpirun -np 4 --oversubscribe "$binary" --batch 3 "${small[@]}"
  # A failure seen by one rank only (its data directory is missing) stops every rank, with one line.
  expect 3 "data directory does not exist" -- mpirun --oversubscribe -np 1 "$binary" "${small[@]}" --out "$work/mpmd" : \
    -np 1 "$binary" "${small[@]}" --out "$work/mpmd" --data "$work/missing"
fi

if ((failures > 0)); then
  echo "cli_test: $failures failure(s)"
  exit 1
fi
echo "cli_test: passed"
