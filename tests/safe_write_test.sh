#!/bin/bash
# Checkpoint writes under SIGKILL (docs/RELIABILITY.md, "Safe writes"): 24 trials of one run that
# writes a checkpoint after every step (--checkpoint-every-steps 1 --keep 2), each killed with SIGKILL
# at a random time (seeded, printed). The test hook CNN_TEST_WRITE_PAUSE_MS widens every stage of a
# write (halfway through the file's bytes, before and after each rename, before pruning), so most kills land
# inside a write. After each kill:
#   - `latest` names an existing, complete checkpoint (never a .tmp);
#   - the newest checkpoint by name loads (`eval`), so `--resume auto` would take a good one;
#   - a leftover .tmp is never taken: the next trial resumes (--resume auto) from a .h5 and removes it.
# In the end the run is resumed to completion and must be bitwise equal to an uninterrupted run.
# Usage: safe_write_test.sh BUILD_DIR SOURCE_DIR
set -u
BUILD_DIR=$1
SOURCE_DIR=$2
CNN=$(realpath "${CNN_BINARY:-$BUILD_DIR/cnn_mpi}")
PY=/usr/bin/python3
[ -x "$CNN" ] || { echo "SKIP: $CNN not built"; exit 77; }
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "SKIP: $PY has no h5py/numpy"; exit 77; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cnn_safe_write.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILURES=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; FAILURES=$((FAILURES + 1)); }

# Synthetic MNIST-format data (1000 training, 100 test images): no data set needed.
"$PY" - "$WORK/data" <<'PYEOF'
import os, struct, sys, random
random.seed(5)
d = sys.argv[1]; os.makedirs(d)
def idx(name, count, image):
    with open(d + "/" + name, "wb") as f:
        if image: f.write(b"\0\0\x08\x03" + struct.pack(">III", count, 28, 28) + bytes(random.randrange(256) for _ in range(count * 784)))
        else: f.write(b"\0\0\x08\x01" + struct.pack(">I", count) + bytes(random.randrange(10) for _ in range(count)))
idx("train-images-idx3-ubyte", 1000, True); idx("train-labels-idx1-ubyte", 1000, False)
idx("t10k-images-idx3-ubyte", 100, True); idx("t10k-labels-idx1-ubyte", 100, False)
PYEOF
# 20 epochs of 20 steps: 24 kills at up to 400 ms must not reach the end (a trial trains ~10 steps).
RUN=(--dataset mnist --data "$WORK/data" --filters 8 --batch 50 --epochs 20 --threads 1 --quiet --optimizer momentum
     --checkpoint-every-steps 1 --keep 2)
TRIALS=24
RANDOM=20261121  # reproducible kill times

"$CNN" "${RUN[@]}" --out "$WORK/ref" >/dev/null 2>&1 || fail "the uninterrupted reference run failed"

newest_by_name() { ls "$1"/checkpoints/ckpt-*.h5 2>/dev/null | sort | tail -1; }

hits=0
for trial in $(seq "$TRIALS"); do
  delay_ms=$((RANDOM % 400))
  CNN_TEST_WRITE_PAUSE_MS=4 "$CNN" "${RUN[@]}" --out "$WORK/run" --resume auto >"$WORK/trial.out" 2>"$WORK/trial.err" &
  pid=$!
  for _ in $(seq 200); do grep -q "^startup:" "$WORK/trial.out" 2>/dev/null && break; sleep 0.02; done
  sleep "$(awk -v ms="$delay_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rc=$?
  resumed=$(sed -n 's/^resume: from \(.*\) (epochs.*/\1/p' "$WORK/trial.out")
  [[ -n $resumed && $resumed != *.h5 ]] && fail "trial $trial: resumed from a non-checkpoint: $resumed"
  tmp=$(ls "$WORK"/run/checkpoints/*.tmp 2>/dev/null | wc -l)
  [ "$tmp" -gt 0 ] && hits=$((hits + 1))
  latest_name=$(cat "$WORK/run/checkpoints/latest" 2>/dev/null)
  problems=()
  if [ -n "$latest_name" ]; then
    [[ $latest_name == ckpt-*.h5 ]] || problems+=("latest names '$latest_name'")
    [ -f "$WORK/run/checkpoints/$latest_name" ] || problems+=("latest names a missing file")
  fi
  newest=$(newest_by_name "$WORK/run")
  if [ -n "$newest" ]; then
    "$CNN" eval --checkpoint "$newest" --dataset mnist --data "$WORK/data" --threads 1 >"$WORK/eval.out" 2>"$WORK/eval.err" ||
      problems+=("newest $(basename "$newest") does not load: $(head -1 "$WORK/eval.err")")
  fi
  detail="kill at +${delay_ms} ms (exit $rc), newest $(basename "${newest:-none}"), $tmp .tmp left"
  if [ ${#problems[@]} -eq 0 ]; then pass "trial $trial: $detail"; else fail "trial $trial: $detail: ${problems[*]}"; fi
  grep -q "^epoch 20/20" "$WORK/trial.out" && { fail "the run completed in trial $trial: too few kills"; break; }
done
echo "    $hits of $trial kills left a partial .tmp behind (landed inside a write)"
[ "$hits" -ge 3 ] && pass "kills landed inside writes ($hits)" || fail "only $hits kills landed inside a write"

# Finish the run: a resume takes the newest valid checkpoint, removes any .tmp, ends bitwise equal.
"$CNN" "${RUN[@]}" --out "$WORK/run" --resume auto >"$WORK/final.out" 2>"$WORK/final.err" || fail "the final resume failed"
ls "$WORK"/run/checkpoints/*.tmp >/dev/null 2>&1 && fail "a .tmp is left after the final resume"
if out=$("$PY" "$SOURCE_DIR/tests/ckpt_compare.py" exact "$(newest_by_name "$WORK/ref")" "$(newest_by_name "$WORK/run")" 2>&1); then
  pass "after $TRIALS kills, resumed to the end: $out"
else
  fail "after $TRIALS kills: $out"
fi
if [ "$FAILURES" -ne 0 ]; then echo "$FAILURES check(s) failed"; exit 1; fi
echo "all checks passed"
