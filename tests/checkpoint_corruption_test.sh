#!/bin/bash
# Raw-byte corruption of a checkpoint a real run wrote (docs/CHECKPOINT.md, "The header"):
#   - every region of the version-2 header, ~40 offsets spread over the HDF5 bytes behind it, truncations
#     and appended bytes: `eval --checkpoint` exits 2 with exactly one stderr line, never by a signal,
#     within a time bound; `--resume PATH` of a few of them exits 2 the same way;
#   - the newest checkpoint of a run directory corrupted: `--resume auto` prints one warning line, falls
#     back to the one before it and completes, bitwise equal to an uninterrupted run;
#   - a version-1 file (tests/ckpt_seal.py --v1) loads with its note line, evaluates and resumes.
# Usage: checkpoint_corruption_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"
SEAL="$SOURCE_DIR/tests/ckpt_seal.py"
LIMIT=20  # seconds; a corrupt file is refused from its header or digest in milliseconds

# The reference: 3 epochs of 20 steps; checkpoints at every epoch (keep 3).
run_as ref "$CNN" "${SMALL[@]}" --epochs 3 --out "$WORK/ref"
expect_rc ref 0
REF=$(latest "$WORK/ref")
GOOD="$WORK/good.h5"
cp "$REF" "$GOOD"
SIZE=$(stat -c %s "$GOOD")
"$PY" "$SEAL" --check "$GOOD" && pass "a checkpoint the trainer wrote carries a valid header" || fail "header of $REF"

# The damaged copies, $WORK/bad/NAME.h5, made in one go: bytes XORed (so that each really changes) at
# every region of the header (prefix, version, crc32, count, newline, padding, last byte), at the
# signature and superblock, and at 40 offsets spread evenly to the end; cut to several lengths;
# bytes appended.
mkdir -p "$WORK/bad"
"$PY" - "$GOOD" "$WORK/bad" <<'PYEOF'
import os, sys
good, out = sys.argv[1], sys.argv[2]
data = open(good, "rb").read()
size = len(data)
def save(name, content):
    open(os.path.join(out, name + ".h5"), "wb").write(content)
for offset in [0, 5, 19, 20, 22, 28, 31, 35, 36, 43, 45, 49, 64, 256, 511] + [512, 520, 536, 560, 700, 1000]:
    damaged = bytearray(data)
    damaged[offset] ^= 0x41
    save("byte_%d" % offset, damaged)
for i in range(40):
    offset = 1024 + (size - 1025) * i // 39
    damaged = bytearray(data)
    damaged[offset] ^= 0x5A
    save("byte_%d" % offset, damaged)
for length in (0, 40, 511, 512, 1000, size // 2, size - 1):
    save("cut_%d" % length, data[:length])
save("append_1", data + b"\0")
save("append_4k", data + os.urandom(4096))
PYEOF

# Each one through eval, four at a time (a process is mostly MPI start-up): exit 2, one stderr line
# naming the file, no signal, within LIMIT seconds. Prints one line per failure.
check_eval() {
  local file=$1 err rc lines
  err=$(timeout -k 5 "$LIMIT" "$CNN" eval --checkpoint "$file" --data "$DATA" --test-samples 100 --threads 1 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -q "^cnn_mpi: error: $file: " <<<"$err"; then
    echo "$(basename "$file"): exit $rc (expected 2), $lines stderr line(s): ${err:0:300}"
  fi
}
export -f check_eval
export CNN DATA LIMIT
COUNT=$(ls "$WORK"/bad/*.h5 | wc -l)
FAILED=$(ls "$WORK"/bad/*.h5 | xargs -P 4 -I{} bash -c 'check_eval {}')
if [ -z "$FAILED" ]; then
  pass "eval: $COUNT corrupted files refused with exit 2 and one line naming the file, none by a signal, each within $LIMIT s"
else
  fail "eval: corrupted files not refused as documented:"
  printf '%s\n' "$FAILED" | sed 's/^/    | /'
fi

# --resume PATH refuses them the same way (and creates no run directory).
MIDDLE=byte_$((1024 + (SIZE - 1025) * 20 / 39))
for name in byte_20 byte_700 "$MIDDLE" cut_1000 append_1; do
  run_as "resume_$name" timeout -k 5 "$LIMIT" "$CNN" "${SMALL[@]}" --epochs 4 --out "$WORK/never_$name" \
    --resume "$WORK/bad/$name.h5"
  expect_rc "resume_$name" 2
  [ "$(grep -c '' "$WORK/resume_$name.err")" -eq 1 ] && pass "resume_$name: one line" || fail "resume_$name: not one line"
  [ -e "$WORK/never_$name" ] && fail "resume_$name: created $WORK/never_$name"
done

# --resume auto with the newest corrupted: one warning, the one before it, the same final bits.
cp -r "$WORK/ref" "$WORK/auto"
rm "$WORK/auto/checkpoints/ckpt-e0003-s00000060.h5"
echo ckpt-e0002-s00000040.h5 >"$WORK/auto/checkpoints/latest"   # as if the run had stopped after epoch 2
cp "$WORK/bad/$MIDDLE.h5" "$WORK/auto/checkpoints/ckpt-e0003-s00000060.h5"
run_as auto "$CNN" "${SMALL[@]}" --epochs 3 --out "$WORK/auto" --resume auto
expect_rc auto 0
[ "$(grep -c '' "$WORK/auto.err")" -eq 1 ] && pass "auto: one stderr line" || fail "auto: $(grep -c '' "$WORK/auto.err") stderr lines"
expect_grep auto "$WORK/auto.err" "^warning: skipping unreadable checkpoint: .*ckpt-e0003-s00000060.h5: checksum mismatch over the whole file"
expect_grep auto "$WORK/auto.out" "resume: from .*ckpt-e0002-s00000040.h5"
same_bits "auto after a corrupt newest" "$REF" "$(latest "$WORK/auto")"

# Version 1: loads with the note, evaluates, resumes (from epoch 2 of the reference) to the same bits.
"$PY" "$SEAL" --v1 "$WORK/ref/checkpoints/ckpt-e0002-s00000040.h5" "$WORK/v1.h5"
run_as v1_eval "$CNN" eval --checkpoint "$WORK/v1.h5" --data "$DATA" --test-samples 100 --threads 1
expect_rc v1_eval 0
expect_grep v1_eval "$WORK/v1_eval.out" "^note: .*v1.h5 is a version-1 checkpoint: verified by dataset checksums only, not whole$"
mkdir -p "$WORK/v1run/checkpoints" && cp "$WORK/v1.h5" "$WORK/v1run/checkpoints/ckpt-e0002-s00000040.h5"
run_as v1_resume "$CNN" "${SMALL[@]}" --epochs 3 --out "$WORK/v1run" --resume auto
expect_rc v1_resume 0
expect_grep v1_resume "$WORK/v1_resume.out" "^note: .*ckpt-e0002-s00000040.h5 is a version-1 checkpoint"
same_bits "resumed from a version-1 file" "$REF" "$(latest "$WORK/v1run")"
"$PY" "$SEAL" --check "$(latest "$WORK/v1run")" && pass "the run resumed from version 1 writes version 2" ||
  fail "no version-2 header after resuming from version 1"

finish
