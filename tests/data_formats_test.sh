#!/bin/bash
# CIFAR-10 binary and HDF5 input through the binaries (docs/DATA.md), on synthetic data this script
# writes in the real formats (IDX with a .gz, CIFAR-10 batches), so it needs no installed data set:
#  - cnn_convert round trips: training on converted HDF5 gives bitwise the parameters of training on
#    the IDX and on the CIFAR-10 files it came from; it never overwrites an output;
#  - --data-mode stream gives bitwise the parameters of memory mode, on 1 rank and under mpirun -np 2,
#    each rank reading only its own samples; a stream run stopped mid-epoch and resumed ends bitwise
#    equal to an uninterrupted one; with --augment too;
#  - malformed HDF5 and CIFAR-10 files: one line naming the file, exit 2 (3 for a missing file).
# Usage: data_formats_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
set -u

CNN=${CNN_BINARY:-$BUILD_DIR/cnn_mpi}
CONVERT=$(dirname "$CNN")/cnn_convert
PY=/usr/bin/python3   # Debian's python has h5py; a pyenv `python3` on PATH may not
COMPARE="$SOURCE_DIR/tests/ckpt_compare.py"
MPIRUN=${MPIEXEC:-mpirun}
[ -x "$CNN" ] || { echo "SKIP: $CNN not built"; exit 77; }
[ -x "$CONVERT" ] || { echo "SKIP: $CONVERT not built"; exit 77; }
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "SKIP: $PY has no h5py/numpy"; exit 77; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cnn_data_test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILURES=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; FAILURES=$((FAILURES + 1)); }
run_as() { local name=$1; shift; "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"; RC=$?; }
expect_rc() {
  if [ "$RC" -eq "$2" ]; then pass "$1: exit $RC"; else
    fail "$1: exit $RC, expected $2"; sed 's/^/    | /' "$WORK/$1.err" | tail -5; fi
}
expect_grep() {
  if grep -q -- "$3" "$2"; then pass "$1: '$3'"; else fail "$1: '$3' not in $(basename "$2")"; sed 's/^/    | /' "$2" | tail -5; fi
}
one_line() { [ "$(wc -l <"$WORK/$1.err")" -eq 1 ] && pass "$1: one line on stderr" || fail "$1: stderr is not one line"; }
latest() { echo "$1/checkpoints/$(cat "$1/checkpoints/latest" 2>/dev/null || echo MISSING-latest)"; }
same_bits() { if out=$("$PY" "$COMPARE" exact "$2" "$3" 2>&1); then pass "$1: $out"; else fail "$1: $out"; fi; }
mpi() { local np=$1; shift; "$MPIRUN" --oversubscribe -np "$np" "$@"; }

# ---- synthetic data in the real formats ------------------------------------------------------------
"$PY" - "$WORK" <<'PYEOF'
import gzip, os, random, struct, sys
work = sys.argv[1]
rng = random.Random(7)
def pixels(n): return bytes(rng.getrandbits(8) for _ in range(n))
os.makedirs(f"{work}/idx"); os.makedirs(f"{work}/cifar")
# IDX: 2000 training and 150 test images of 28x28; the training images gzipped.
for prefix, n, opener in (("train", 2000, gzip.open), ("t10k", 150, open)):
    suffix = ".gz" if opener is gzip.open else ""
    with opener(f"{work}/idx/{prefix}-images-idx3-ubyte{suffix}", "wb") as f:
        f.write(struct.pack(">BBBBIII", 0, 0, 8, 3, n, 28, 28) + pixels(n * 784))
    with open(f"{work}/idx/{prefix}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">BBBBI", 0, 0, 8, 1, n) + bytes(rng.randrange(10) for _ in range(n)))
# CIFAR-10 binary: 5 batches of 40 records and a test batch of 30; batch 2 gzipped.
def batch(n): return b"".join(bytes([rng.randrange(10)]) + pixels(3072) for _ in range(n))
for b in range(1, 6):
    data = batch(40)
    if b == 2:
        with gzip.open(f"{work}/cifar/data_batch_2.bin.gz", "wb") as f: f.write(data)
    else:
        with open(f"{work}/cifar/data_batch_{b}.bin", "wb") as f: f.write(data)
with open(f"{work}/cifar/test_batch.bin", "wb") as f: f.write(batch(30))
PYEOF

TRAIN=(--filters 4 --batch 50 --threads 1 --quiet --optimizer momentum --lr 0.05)

# ---- the converter -----------------------------------------------------------------------------------
run_as convert_idx "$CONVERT" --dataset mnist --data "$WORK/idx" --out "$WORK/h5idx" --deflate 4
expect_rc convert_idx 0
expect_grep convert_idx "$WORK/convert_idx.out" "2000 training and 150 test images of 1x28x28, 10 classes"
run_as convert_cifar "$CONVERT" --dataset cifar10 --data "$WORK/cifar" --out "$WORK/h5cifar" --chunk-samples 4
expect_rc convert_cifar 0
cp "$WORK/h5idx/train.h5" "$WORK/train.before"
run_as convert_again "$CONVERT" --dataset mnist --data "$WORK/idx" --out "$WORK/h5idx"
expect_rc convert_again 3
expect_grep convert_again "$WORK/convert_again.err" "h5idx/train.h5: already exists; cnn_convert never overwrites"
cmp -s "$WORK/h5idx/train.h5" "$WORK/train.before" && pass "convert_again: train.h5 unchanged" || fail "convert_again: train.h5 changed"
[ -z "$(ls "$WORK/h5idx" | grep -v '^t[a-z]*\.h5$')" ] && pass "convert: no temporary files left" || fail "convert: left $(ls "$WORK/h5idx")"
if "$PY" - "$WORK/h5idx/train.h5" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    i, l = f["/images"], f["/labels"]
    ok = (i.dtype == "uint8" and i.shape == (2000, 1, 28, 28) and i.chunks == (1, 1, 28, 28)
          and i.compression == "gzip" and l.shape == (2000,) and int(l.attrs["classes"]) == 10)
sys.exit(0 if ok else 1)
PYEOF
then pass "convert: uint8 [N,1,28,28], per-sample chunks, deflate, classes attribute"; else fail "convert: layout"; fi

run_as idx "$CNN" --dataset mnist --data "$WORK/idx" "${TRAIN[@]}" --epochs 1 --out "$WORK/r_idx"
expect_rc idx 0
run_as h5idx "$CNN" --dataset hdf5 --data "$WORK/h5idx" --data-mode memory "${TRAIN[@]}" --epochs 1 --out "$WORK/r_h5idx"
expect_rc h5idx 0
same_bits "IDX -> HDF5 trains bitwise alike" "$(latest "$WORK/r_idx")" "$(latest "$WORK/r_h5idx")"
run_as cifar "$CNN" --dataset cifar10 --data "$WORK/cifar" "${TRAIN[@]}" --batch 20 --epochs 1 --out "$WORK/r_cifar"
expect_rc cifar 0
expect_grep cifar "$WORK/cifar.out" "model_detail: conv3x3:4 relu maxpool2 fc:10 (input 3x32x32"
run_as h5cifar "$CNN" --dataset hdf5 --data "$WORK/h5cifar" --data-mode stream "${TRAIN[@]}" --batch 20 --epochs 1 \
  --out "$WORK/r_h5cifar" --stream-window-mb 1
expect_rc h5cifar 0
same_bits "CIFAR-10 binary -> HDF5 (streamed) trains bitwise alike" "$(latest "$WORK/r_cifar")" "$(latest "$WORK/r_h5cifar")"

# ---- stream vs memory --------------------------------------------------------------------------------
H5=(--dataset hdf5 --data "$WORK/h5idx" "${TRAIN[@]}" --epochs 2)
STREAM=(--data-mode stream --stream-window-mb 1)   # 1 MiB: several windows per epoch
run_as mem1 "$CNN" "${H5[@]}" --data-mode memory --out "$WORK/mem1"
expect_rc mem1 0
run_as str1 "$CNN" "${H5[@]}" "${STREAM[@]}" --out "$WORK/str1"
expect_rc str1 0
expect_grep str1 "$WORK/str1.out" "data_mode: stream (windows of 13 steps, 1 MiB for two, read ahead on a thread)"
expect_grep str1 "$WORK/str1.out" "stream: rank 0 read 4000 training images (3136000 bytes) in .* reads over 8 windows, and 150 test images"
same_bits "stream = memory, 1 rank" "$(latest "$WORK/mem1")" "$(latest "$WORK/str1")"

run_as mem2 mpi 2 "$CNN" "${H5[@]}" --data-mode memory --out "$WORK/mem2"
expect_rc mem2 0
run_as str2 mpi 2 "$CNN" "${H5[@]}" "${STREAM[@]}" --out "$WORK/str2"
expect_rc str2 0
# 2 epochs x 40 steps x 25 samples per rank; the test set split 75 + 75.
expect_grep str2 "$WORK/str2.out" "stream: rank 0 read 2000 training images (1568000 bytes) .*, and 75 test images"
expect_grep str2 "$WORK/str2.out" "stream: rank 1 read 2000 training images (1568000 bytes) .*, and 75 test images"
same_bits "stream = memory, 2 ranks" "$(latest "$WORK/mem2")" "$(latest "$WORK/str2")"
# With --augment: a window's samples draw their crops and flips from their place in the global batch,
# as in memory mode, so the two still train bitwise alike (stream on 2 ranks against memory on 2).
run_as augmem mpi 2 "$CNN" "${H5[@]}" --data-mode memory --augment crop:2,flip --out "$WORK/augmem"
expect_rc augmem 0
run_as augstr mpi 2 "$CNN" "${H5[@]}" "${STREAM[@]}" --augment crop:2,flip --out "$WORK/augstr"
expect_rc augstr 0
same_bits "stream = memory with --augment, 2 ranks" "$(latest "$WORK/augmem")" "$(latest "$WORK/augstr")"

# Stopped mid-epoch (epoch 2, step 7: inside a window, not at its start) on 2 ranks, then resumed.
run_as stop env CNN_TEST_STOP_AFTER_STEPS=47 "$MPIRUN" --oversubscribe -np 2 "$CNN" "${H5[@]}" "${STREAM[@]}" --out "$WORK/resumed"
expect_rc stop 5
expect_grep stop "$WORK/stop.err" "stopped by SIGUSR1 at epoch 2 step 7"
run_as resume mpi 2 "$CNN" "${H5[@]}" "${STREAM[@]}" --out "$WORK/resumed" --resume auto
expect_rc resume 0
same_bits "stream mid-epoch resume = uninterrupted" "$(latest "$WORK/str2")" "$(latest "$WORK/resumed")"
# The data identity of HDF5 does not depend on the mode: a memory run may resume a stream run.
run_as stop_mem env CNN_TEST_STOP_AFTER_STEPS=47 "$CNN" "${H5[@]}" "${STREAM[@]}" --out "$WORK/switched"
expect_rc stop_mem 5
run_as resume_mem "$CNN" "${H5[@]}" --data-mode memory --out "$WORK/switched" --resume auto
expect_rc resume_mem 0
same_bits "stream stopped, resumed in memory mode" "$(latest "$WORK/mem1")" "$(latest "$WORK/switched")"

# ---- malformed files through the binary ---------------------------------------------------------------
# bad NAME PYTHON: a copy of the converted IDX files with train.h5 edited by h5py (variable f, r+).
bad() {
  mkdir -p "$WORK/bad_$1" && cp "$WORK/h5idx/"*.h5 "$WORK/bad_$1/"
  "$PY" - "$WORK/bad_$1/train.h5" "$2" <<'PYEOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    exec(sys.argv[2])
PYEOF
}
bad wrong_type 'del f["/images"]; f["/images"] = np.zeros((2000, 1, 28, 28), np.float32)'
bad wrong_rank 'del f["/images"]; f["/images"] = np.zeros((2000, 28, 28), np.uint8)'
bad mismatched_n 'del f["/labels"]; f["/labels"] = np.zeros(1999, np.uint8)'
bad bad_label 'f["/labels"][5] = 10'
bad not_hdf5 'pass'; printf 'plain text, not HDF5\n' >"$WORK/bad_not_hdf5/train.h5"
bad truncated 'pass'; truncate -s $(($(stat -c %s "$WORK/bad_truncated/train.h5") / 2)) "$WORK/bad_truncated/train.h5"
bad missing 'pass'; rm "$WORK/bad_missing/train.h5"

check_bad() {  # NAME EXIT PATTERN [extra options]
  local name=$1 code=$2 pattern=$3; shift 3
  run_as "bad_$name" "$CNN" --dataset hdf5 --data "$WORK/bad_$name" "${TRAIN[@]}" --out "$WORK/out_$name" "$@"
  expect_rc "bad_$name" "$code"
  expect_grep "bad_$name" "$WORK/bad_$name.err" "$pattern"
  one_line "bad_$name"
  [ ! -e "$WORK/out_$name" ] && pass "bad_$name: no run directory" || fail "bad_$name: made a run directory"
}
check_bad wrong_type 2 "bad_wrong_type/train.h5: wrong datatype: /images is float of 4 byte(s), expected uint8"
check_bad wrong_rank 2 "bad_wrong_rank/train.h5: wrong rank: /images has shape \[2000,28,28\], expected rank 4" --data-mode stream
check_bad mismatched_n 2 "bad_mismatched_n/train.h5: sample counts disagree: /images holds 2000 images but /labels holds 1999"
check_bad bad_label 2 "bad_bad_label/train.h5: label 10 at index 5 of /labels is not below 10" --data-mode stream
check_bad not_hdf5 2 "bad_not_hdf5/train.h5: not an HDF5 file"
check_bad truncated 2 "bad_truncated/train.h5: cannot be read as HDF5 (truncated or corrupt?)"
check_bad missing 3 "bad_missing/train.h5: file does not exist"
mkdir -p "$WORK/bad_path" && cp "$WORK/h5idx/"*.h5 "$WORK/bad_path/"
check_bad path 2 "bad_path/train.h5: missing dataset /pixels (set its path with --h5-images)" --h5-images /pixels

# CIFAR-10 binary: a label of 10, a truncated batch, a missing batch.
for name in cifar_label cifar_cut cifar_missing; do cp -r "$WORK/cifar" "$WORK/bad_$name"; done
printf '\x0a' | dd of="$WORK/bad_cifar_label/data_batch_4.bin" bs=1 seek=3073 conv=notrunc status=none
truncate -s -5 "$WORK/bad_cifar_cut/test_batch.bin"
rm "$WORK/bad_cifar_missing/data_batch_5.bin"
check_cifar() {  # NAME EXIT PATTERN
  run_as "$1" "$CNN" --dataset cifar10 --data "$WORK/bad_$1" "${TRAIN[@]}" --out "$WORK/out_$1"
  expect_rc "$1" "$2"
  expect_grep "$1" "$WORK/$1.err" "$3"
  one_line "$1"
}
check_cifar cifar_label 2 "bad_cifar_label/data_batch_4.bin: label 10 in record 1 (byte offset 3073) is not below 10"
check_cifar cifar_cut 2 "bad_cifar_cut/test_batch.bin: truncated or not CIFAR-10 binary: 92185 bytes is not a whole number of 3073-byte records"
check_cifar cifar_missing 3 "bad_cifar_missing/data_batch_5.bin: file does not exist"

# Usage errors of the new options.
run_as stream_idx "$CNN" --dataset mnist --data "$WORK/idx" --data-mode stream
expect_rc stream_idx 2
expect_grep stream_idx "$WORK/stream_idx.err" "data-mode stream needs --dataset hdf5"
run_as window0 "$CNN" --dataset hdf5 --data "$WORK/h5idx" --stream-window-mb 0
expect_rc window0 2

if [ "$FAILURES" -ne 0 ]; then echo "$FAILURES check(s) failed"; exit 1; fi
echo "all checks passed"
