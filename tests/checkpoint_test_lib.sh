# Shared by the checkpoint script tests (resume_test.sh, signal_test.sh, checkpoint_input_test.sh).
# Source it after setting BUILD_DIR and SOURCE_DIR. Exit 77 means "skipped" to CTest.
set -u

CNN=${CNN_BINARY:-$BUILD_DIR/cnn_mpi}
DATA=/usr/share/datasets/fashion-mnist
PY=/usr/bin/python3   # Debian's python has h5py; a pyenv `python3` on PATH may not
COMPARE="$SOURCE_DIR/tests/ckpt_compare.py"
MPIRUN=${MPIEXEC:-mpirun}
EXIT_USAGE=2
EXIT_IO=3
EXIT_STOPPED=5

# Small enough that each run takes well under a second of training on the 2-core CI machine.
SMALL=(--data "$DATA" --train-samples 2000 --test-samples 500 --filters 8 --batch 100 --threads 1 --quiet
       --optimizer momentum)

[ -x "$CNN" ] || { echo "SKIP: $CNN not built"; exit 77; }
[ -e "$DATA/train-images-idx3-ubyte.gz" ] || [ -e "$DATA/train-images-idx3-ubyte" ] ||
  { echo "SKIP: Fashion-MNIST not installed in $DATA"; exit 77; }
"$PY" -c "import h5py" 2>/dev/null || { echo "SKIP: $PY has no h5py"; exit 77; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cnn_ckpt_test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILURES=0

pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; FAILURES=$((FAILURES + 1)); }
finish() {
  if [ "$FAILURES" -ne 0 ]; then echo "$FAILURES check(s) failed"; exit 1; fi
  echo "all checks passed"; exit 0
}

# Runs a command, saving stdout/stderr to $WORK/NAME.out/.err; sets RC.
run_as() {
  local name=$1; shift
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  RC=$?
}

expect_rc() {  # NAME EXPECTED
  if [ "$RC" -eq "$2" ]; then pass "$1: exit $RC"; else
    fail "$1: exit $RC, expected $2"; sed 's/^/    | /' "$WORK/$1.err" | tail -5; fi
}

expect_grep() {  # NAME FILE PATTERN
  if grep -q -- "$3" "$2"; then pass "$1: '$3'"; else fail "$1: '$3' not in $(basename "$2")"; sed 's/^/    | /' "$2" | tail -5; fi
}

latest() { echo "$1/checkpoints/$(cat "$1/checkpoints/latest" 2>/dev/null || echo MISSING-latest)"; }

same_bits() {  # NAME A B
  if out=$("$PY" "$COMPARE" exact "$2" "$3" 2>&1); then pass "$1: $out"; else fail "$1: $out"; fi
}

close_to() {  # NAME A B
  if out=$("$PY" "$COMPARE" rel=1e-5 "$2" "$3" 2>&1); then pass "$1: $out"; else fail "$1: $out"; fi
}

mpi() {  # NP ARGS...  (oversubscribed: CI has 2 cores)
  local np=$1; shift
  "$MPIRUN" --oversubscribe -np "$np" "$@"
}
