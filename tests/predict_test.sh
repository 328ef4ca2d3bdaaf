#!/bin/bash
# `cnn_mpi predict` (docs/PREDICT.md), on synthetic data this script writes, so it needs no installed
# data set. A tiny model trains one short epoch; then:
#  - one row per image, in index order, with the split's label; the predicted class is the argmax of
#    the row's probabilities, which sum to 1; the accuracy of the CSV is what `eval` prints;
#  - the rows are byte-identical for 1 and 2 ranks (mpirun --oversubscribe) and for 1 and 2 threads;
#    `seq` predicts the same classes as `threads`, probabilities within 1e-5;
#  - every format the trainer reads: IDX (test split gzipped), HDF5 from cnn_convert (the same rows as
#    the IDX it came from, on 2 ranks too), HDF5 without a labels dataset (empty label column, the same
#    predictions), CIFAR-10 binary; --split train; --out - (standard output);
#  - an existing --out is refused before any work and left byte-identical, and so is a file created
#    while predict runs (CNN_TEST_WRITE_PAUSE_MS holds the final link open); no temporary is left.
# Bad command lines and inputs of predict are cases of tests/bad_input/57_predict.cases.
# Usage: predict_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
set -u

CNN=${CNN_BINARY:-$BUILD_DIR/cnn_mpi}
CONVERT=$(dirname "$CNN")/cnn_convert
PY=/usr/bin/python3   # Debian's python has h5py and numpy
MPIRUN=${MPIEXEC:-mpirun}
[ -x "$CNN" ] || { echo "SKIP: $CNN not built"; exit 77; }
[ -x "$CONVERT" ] || { echo "SKIP: $CONVERT not built"; exit 77; }
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "SKIP: $PY has no h5py/numpy"; exit 77; }
source "$SOURCE_DIR/tools/mpi-env.sh"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cnn_predict_test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILURES=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; FAILURES=$((FAILURES + 1)); }
# run NAME CMD...: stdout and stderr to $WORK/NAME.out and .err, the exit code in RC.
run() { local name=$1; shift; "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"; RC=$?; }
expect_rc() {
  if [ "$RC" -eq "$2" ]; then pass "$1: exit $RC"; else
    fail "$1: exit $RC, expected $2"; sed 's/^/    | /' "$WORK/$1.err" | tail -5; fi
}
mpi() { local np=$1; shift; "$MPIRUN" --oversubscribe -np "$np" "$@"; }
same_file() { if cmp -s "$2" "$3"; then pass "$1"; else fail "$1: $(cmp "$2" "$3" 2>&1 | head -1)"; fi; }

# Synthetic data a small CNN can learn a little of: the class sets which band of rows is bright.
"$PY" - "$WORK/idx" "$WORK/cifar" <<'PYEOF' || { echo "FAIL - fixtures"; exit 1; }
import gzip, os, struct, sys
import numpy as np
rng = np.random.default_rng(7)
def images(labels, channels, side):
    x = rng.integers(0, 120, size=(len(labels), channels, side, side))
    for i, y in enumerate(labels):
        x[i, :, 2 * y + 4:2 * y + 7, :] += 120
    return x.astype(np.uint8)
idx, cifar = sys.argv[1], sys.argv[2]
os.makedirs(idx); os.makedirs(cifar)
for prefix, n, packed in (("train", 400, False), ("t10k", 300, True)):
    y = rng.integers(0, 10, size=n).astype(np.uint8)
    x = images(y, 1, 28)
    img = b"\0\0\x08\x03" + struct.pack(">III", n, 28, 28) + x.tobytes()
    (gzip.open if packed else open)(f"{idx}/{prefix}-images-idx3-ubyte" + (".gz" if packed else ""), "wb").write(img)
    open(f"{idx}/{prefix}-labels-idx1-ubyte", "wb").write(b"\0\0\x08\x01" + struct.pack(">I", n) + y.tobytes())
for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    y = rng.integers(0, 10, size=20).astype(np.uint8)
    x = images(y, 3, 32)
    open(f"{cifar}/{name}", "wb").write(b"".join(bytes([y[i]]) + x[i].tobytes() for i in range(20)))
PYEOF
"$CONVERT" --dataset mnist --data "$WORK/idx" --out "$WORK/h5" >/dev/null 2>&1 || { echo "FAIL - cnn_convert"; exit 1; }
mkdir "$WORK/h5_unlabelled"
cp "$WORK/h5/test.h5" "$WORK/h5_unlabelled/test.h5"
"$PY" -c 'import h5py, sys; f = h5py.File(sys.argv[1], "r+"); del f["/labels"]; f.close()' \
  "$WORK/h5_unlabelled/test.h5" || { echo "FAIL - unlabelled HDF5 fixture"; exit 1; }

DATA=(--dataset mnist --data "$WORK/idx")
run train "$CNN" "${DATA[@]}" --filters 4 --batch 50 --epochs 1 --lr 0.05 --threads 1 --quiet --out "$WORK/run"
expect_rc train 0
CKPT="$WORK/run/checkpoints/$(cat "$WORK/run/checkpoints/latest" 2>/dev/null)"

# --- the rows, against the data and against eval -------------------------------------------------
run eval "$CNN" eval --checkpoint "$CKPT" "${DATA[@]}" --threads 1
expect_rc eval 0
run one "$CNN" predict --checkpoint "$CKPT" "${DATA[@]}" --threads 1 --out "$WORK/one.csv"
expect_rc one 0
# check_rows NAME CSV LABELS(IDX file or "none") N [EVAL_OUTPUT]: the rows' own consistency.
check_rows() {
  local name=$1; shift
  if out=$("$PY" - "$@" <<'PYEOF' 2>&1
import csv, re, struct, sys
path, labels_path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = list(csv.reader(open(path)))
assert rows[0] == ["index", "label", "predicted"] + [f"p{k}" for k in range(10)], f"header {rows[0]}"
rows = rows[1:]
assert len(rows) == n, f"{len(rows)} rows, expected {n}"
labels = None
if labels_path != "none":
    raw = open(labels_path, "rb").read()
    labels = list(raw[8:8 + n])
correct = 0
for i, r in enumerate(rows):
    assert int(r[0]) == i, f"row {i} has index {r[0]}"
    p = [float(v) for v in r[3:]]
    pred = int(r[2])
    assert p[pred] == max(p), f"row {i}: predicted {pred} is not the argmax of {p}"
    assert abs(sum(p) - 1) < 1e-5, f"row {i}: probabilities sum to {sum(p)}"
    if labels is None:
        assert r[1] == "", f"row {i}: label '{r[1]}' where none is known"
    else:
        assert int(r[1]) == labels[i], f"row {i}: label {r[1]}, the data says {labels[i]}"
        correct += int(r[1]) == pred
if len(sys.argv) > 4:
    acc = re.search(r"test_acc ([0-9.]+)%", open(sys.argv[4]).read()).group(1)
    mine = f"{100.0 * correct / n:.2f}"
    assert mine == acc, f"the CSV's accuracy is {mine}%, eval printed {acc}%"
    print(f"{n} rows, accuracy {mine}% as eval")
else:
    print(f"{n} rows")
PYEOF
  ); then pass "$name: $out"; else fail "$name: $out"; fi
}
check_rows "rows of the test split" "$WORK/one.csv" "$WORK/idx/t10k-labels-idx1-ubyte" 300 "$WORK/eval.out"
grep -q "accuracy $(grep -o 'test_acc [0-9.]*' "$WORK/eval.out" | cut -d' ' -f2)%" "$WORK/one.out" &&
  pass "the summary line's accuracy is eval's" || fail "summary: $(cat "$WORK/one.out")"

# --- any rank or thread count; seq against threads -----------------------------------------------
# --batch 1: a training option, which does not limit predict's ranks.
run two mpi 2 "$CNN" predict --checkpoint "$CKPT" "${DATA[@]}" --threads 1 --batch 1 --out "$WORK/two.csv"
expect_rc two 0
same_file "2 ranks write the rows of 1 rank" "$WORK/one.csv" "$WORK/two.csv"
# Blocks of 37 images, one per rank and round: 5 rounds, the last a block of 4 images for one rank and
# none for the other.
run rounds env CNN_TEST_PREDICT_BLOCK=37 "$MPIRUN" --oversubscribe -np 2 -x CNN_TEST_PREDICT_BLOCK "$CNN" predict --checkpoint "$CKPT" \
  "${DATA[@]}" --threads 1 --out "$WORK/rounds.csv"
expect_rc rounds 0
same_file "2 ranks in 5 rounds write the rows of 1 rank" "$WORK/one.csv" "$WORK/rounds.csv"
run threads2 "$CNN" predict --checkpoint "$CKPT" "${DATA[@]}" --threads 2 --out "$WORK/threads2.csv"
expect_rc threads2 0
same_file "2 threads write the rows of 1 thread" "$WORK/one.csv" "$WORK/threads2.csv"
run seq "$CNN" predict --checkpoint "$CKPT" "${DATA[@]}" --backend seq --out "$WORK/seq.csv"
expect_rc seq 0
if out=$("$PY" - "$WORK/one.csv" "$WORK/seq.csv" <<'PYEOF' 2>&1
import csv, sys
a, b = (list(csv.reader(open(p)))[1:] for p in sys.argv[1:3])
assert len(a) == len(b) == 300
assert all(r[:3] == s[:3] for r, s in zip(a, b)), "seq predicts other classes than threads"
worst = max(abs(float(x) - float(y)) for r, s in zip(a, b) for x, y in zip(r[3:], s[3:]))
assert worst <= 1e-5, f"probabilities differ by {worst}"
print(f"same classes, probabilities within {worst:.1g}")
PYEOF
); then pass "seq against threads: $out"; else fail "seq against threads: $out"; fi

# --- other formats and splits --------------------------------------------------------------------
run h5 env CNN_TEST_PREDICT_BLOCK=50 "$MPIRUN" --oversubscribe -np 2 -x CNN_TEST_PREDICT_BLOCK "$CNN" predict --checkpoint "$CKPT" --dataset hdf5 --data "$WORK/h5" --threads 1 --out "$WORK/h5.csv"
expect_rc h5 0
same_file "HDF5 (2 ranks, 3 rounds, read by hyperslab) gives the rows of the IDX it came from" "$WORK/one.csv" "$WORK/h5.csv"
run nolabels "$CNN" predict --checkpoint "$CKPT" --dataset hdf5 --data "$WORK/h5_unlabelled" --threads 1 \
  --out "$WORK/nolabels.csv"
expect_rc nolabels 0
check_rows "HDF5 without labels" "$WORK/nolabels.csv" none 300
if cmp -s <(cut -d, -f1,3- "$WORK/one.csv") <(cut -d, -f1,3- "$WORK/nolabels.csv"); then
  pass "HDF5 without labels: the same predictions"; else fail "HDF5 without labels: other predictions"; fi
grep -q accuracy "$WORK/nolabels.out" && fail "no accuracy without labels: $(cat "$WORK/nolabels.out")" ||
  pass "no accuracy in the summary without labels"
run train_split "$CNN" predict --checkpoint "$CKPT" "${DATA[@]}" --threads 1 --split train --train-samples 120 \
  --out "$WORK/train.csv"
expect_rc train_split 0
check_rows "--split train --train-samples 120" "$WORK/train.csv" "$WORK/idx/train-labels-idx1-ubyte" 120
run stdout "$CNN" predict --checkpoint "$CKPT" "${DATA[@]}" --threads 1 --test-samples 50 --out -
expect_rc stdout 0
if cmp -s "$WORK/stdout.out" <(head -51 "$WORK/one.csv") && grep -q '^predict: 50 images' "$WORK/stdout.err"; then
  pass "--out -: the CSV on stdout, the summary on stderr"; else fail "--out -: $(head -3 "$WORK/stdout.err")"; fi

CIFAR=(--dataset cifar10 --data "$WORK/cifar" --threads 1)
run cifar_train "$CNN" "${CIFAR[@]}" --filters 2 --batch 20 --epochs 1 --quiet --out "$WORK/cifar_run"
expect_rc cifar_train 0
CIFAR_CKPT="$WORK/cifar_run/checkpoints/$(cat "$WORK/cifar_run/checkpoints/latest" 2>/dev/null)"
run cifar_eval "$CNN" eval --checkpoint "$CIFAR_CKPT" "${CIFAR[@]}"
run cifar mpi 2 "$CNN" predict --checkpoint "$CIFAR_CKPT" "${CIFAR[@]}" --out "$WORK/cifar.csv"
expect_rc cifar 0
"$PY" -c 'import sys; open(sys.argv[2], "wb").write(b"\0" * 8 + open(sys.argv[1], "rb").read()[::3073])' \
  "$WORK/cifar/test_batch.bin" "$WORK/cifar_labels"
check_rows "CIFAR-10 binary on 2 ranks" "$WORK/cifar.csv" "$WORK/cifar_labels" 20 "$WORK/cifar_eval.out"

# --- never overwrite -----------------------------------------------------------------------------
printf 'precious\n' >"$WORK/kept.csv"
before=$(sha256sum <"$WORK/kept.csv")
run exists "$CNN" predict --checkpoint "$CKPT" "${DATA[@]}" --threads 1 --out "$WORK/kept.csv"
expect_rc exists 2
[ "$(wc -l <"$WORK/exists.err")" -eq 1 ] && grep -q 'kept.csv: already exists' "$WORK/exists.err" &&
  pass "an existing --out: one line" || fail "an existing --out: $(cat "$WORK/exists.err")"
[ "$(sha256sum <"$WORK/kept.csv")" = "$before" ] && pass "the existing file is byte-identical" ||
  fail "the existing file changed"
# A file that appears while predict runs: the final link fails instead of replacing it.
mkdir "$WORK/race"
CNN_TEST_WRITE_PAUSE_MS=2000 "$CNN" predict --checkpoint "$CKPT" "${DATA[@]}" --threads 1 \
  --out "$WORK/race/p.csv" >"$WORK/race.out" 2>"$WORK/race.err" &
pid=$!
for _ in $(seq 200); do compgen -G "$WORK/race/.p.csv.*.tmp" >/dev/null && break; sleep 0.05; done
printf 'theirs\n' >"$WORK/race/p.csv"
wait "$pid"
RC=$?
expect_rc race 2
grep -q 'p.csv: already exists' "$WORK/race.err" && [ "$(cat "$WORK/race/p.csv")" = theirs ] &&
  pass "a file created meanwhile is not replaced" || fail "race: $(cat "$WORK/race.err"; cat "$WORK/race/p.csv")"
[ "$(ls -A "$WORK/race")" = p.csv ] && pass "no temporary left behind" || fail "left: $(ls -A "$WORK/race")"
ls -A "$WORK" | grep -q '\.tmp$' && fail "temporaries left in $WORK: $(ls -A "$WORK")" || true

echo "$FAILURES failure(s)"
[ "$FAILURES" -eq 0 ]
