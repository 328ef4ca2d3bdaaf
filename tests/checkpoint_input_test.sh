#!/bin/bash
# Bad checkpoint files given to `--resume PATH` and to `eval --checkpoint PATH`: each gives one line on
# stderr and its documented exit code (3: cannot open; 2: not a valid checkpoint), and neither the
# file nor any run directory is written. (docs/CHECKPOINT.md, "Reading and validation")
# Usage: checkpoint_input_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"

run_as good "$CNN" "${SMALL[@]}" --epochs 1 --out "$WORK/good"
expect_rc good 0
GOOD=$(latest "$WORK/good")

# make_bad NAME PYTHON-SNIPPET: a copy of GOOD edited with h5py (variable `f`, opened r+), then resealed
# (tests/ckpt_seal.py: the version-2 header recomputed), so that the checks behind the digest are reached.
make_bad() {
  cp "$GOOD" "$WORK/$1.h5"
  "$PY" - "$WORK/$1.h5" "$2" <<'PYEOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    exec(sys.argv[2])
PYEOF
  "$PY" "$SOURCE_DIR/tests/ckpt_seal.py" "$WORK/$1.h5"
}

cp "$GOOD" "$WORK/truncated.h5" && truncate -s $(($(stat -c %s "$GOOD") / 2)) "$WORK/truncated.h5"
printf 'not an HDF5 file\n' >"$WORK/text.h5"
make_bad format 'f.attrs["format"] = "someone-else"'
make_bad version 'f.attrs["version"] = np.int64(3)'
make_bad missing_dataset 'del f["/model/fc/bias"]'
make_bad wrong_shape 'del f["/model/conv1/bias"]; f["/model/conv1/bias"] = np.zeros(4, np.float32)'
cp "$GOOD" "$WORK/flipped.h5"
"$PY" - "$WORK/flipped.h5" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    offset = f["/model/fc/weight"].id.get_offset()
with open(sys.argv[1], "r+b") as f:
    f.seek(offset + 64)
    b = f.read(2)
    f.seek(offset + 64)
    f.write(bytes(x ^ 0x5A for x in b))
PYEOF
cp "$WORK/flipped.h5" "$WORK/flipped_unsealed.h5"
"$PY" "$SOURCE_DIR/tests/ckpt_seal.py" "$WORK/flipped.h5"   # past the digest: the dataset checksum catches it

# case FILE EXIT MESSAGE-PATTERN
check_case() {
  local name=$1 code=$2 pattern=$3 file="$WORK/$1.h5"
  [ -e "$file" ] && cp "$file" "$WORK/$name.before"
  run_as "resume_$name" "$CNN" "${SMALL[@]}" --epochs 2 --out "$WORK/out_$name" --resume "$file"
  expect_rc "resume_$name" "$code"
  expect_grep "resume_$name" "$WORK/resume_$name.err" "$pattern"
  [ "$(wc -l <"$WORK/resume_$name.err")" -eq 1 ] && pass "resume_$name: one line" || fail "resume_$name: not one line"
  [ ! -e "$WORK/out_$name" ] && pass "resume_$name: no run directory made" || fail "resume_$name: made $WORK/out_$name"
  run_as "eval_$name" "$CNN" eval --checkpoint "$file" --data "$DATA" --test-samples 500 --threads 1
  expect_rc "eval_$name" "$code"
  expect_grep "eval_$name" "$WORK/eval_$name.err" "$pattern"
  [ "$(wc -l <"$WORK/eval_$name.err")" -eq 1 ] && pass "eval_$name: one line" || fail "eval_$name: not one line"
  if [ -e "$file" ]; then cmp -s "$file" "$WORK/$name.before" && pass "$name: file unchanged" || fail "$name: file changed"; fi
}

check_case missing "$EXIT_IO" "missing.h5: cannot open checkpoint: No such file or directory"
check_case text "$EXIT_USAGE" "text.h5: not an HDF5 file"
check_case format "$EXIT_USAGE" "not a cnn_mpi checkpoint (format is 'someone-else'"
check_case version "$EXIT_USAGE" "unsupported checkpoint version 3"
check_case truncated "$EXIT_USAGE" "truncated.h5: "
check_case flipped "$EXIT_USAGE" "checksum mismatch in /model/fc/weight"
check_case flipped_unsealed "$EXIT_USAGE" "flipped_unsealed.h5: checksum mismatch over the whole file"
check_case missing_dataset "$EXIT_USAGE" "missing dataset /model/fc/bias"
check_case wrong_shape "$EXIT_USAGE" "/model/conv1/bias has shape \[4\], expected \[8\]"

# The good file still works for both.
run_as eval_good "$CNN" eval --checkpoint "$GOOD" --data "$DATA" --test-samples 500 --threads 1
expect_rc eval_good 0
expect_grep eval_good "$WORK/eval_good.out" "^test_loss"

finish
