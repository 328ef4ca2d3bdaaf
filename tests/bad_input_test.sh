#!/bin/bash
# The bad-input matrix (docs/BAD_INPUT.md): command-line values, data files, checkpoints, run
# directories and resume targets. Every case must give
#   - the documented exit code (2: bad usage or content, 3: cannot open/read/write);
#   - exactly one error line on stderr, `cnn_mpi: error: ...`, matching the case's pattern (under
#     mpirun: exactly one such line among mpirun's own);
#   - no crash: no exit by a signal, no core file, no sanitizer report (ASan/UBSan/LSan builds);
#   - no file modified, created or removed: the fixtures, the run directories and the working
#     directory hash the same before and after.
#
# Adding a case is one line in tests/bad_input/NN_CLASS.cases: NAME || EXIT || PATTERN || ARGUMENTS. In ARGUMENTS
#   @dir(KIND:FILE:OP[:ARG])   a copy of the fixture directory $FX/KIND with FILE changed by OP
#   @file(PATH:OP[:ARG])       a copy of the fixture file $FX/PATH changed by OP
#   $FX, $CNN                  the fixture root, the binary; (good data in $FX/idx, a finished run in $FX/run, ...)
#   $COMMON                    (a word of its own) the common arguments, for the second part of an MPMD line
#   mpi N ...                  (first word) runs under mpirun with N ranks
#   env NAME=VALUE... ...      (first words) runs with these environment variables set (a launcher's
#                              variables, e.g. an srun step's), then the arguments
# OPs (format-independent, so a new format only needs a good fixture, made in make_fixtures):
#   keep, empty, delete, dir (a directory in its place), truncate:N (keep N bytes; negative: drop -N),
#   poke:OFFSET:HEX (overwrite bytes, their complement where they already hold HEX; negative offset from the end), append:HEX, text:STRING,
#   from:PATH (a copy of the fixture $FX/PATH), gzip, badgzip (gzip magic, then junk), fifo (a named pipe
#   in its place: nothing may block on it),
#   h5:PYTHON (edit with h5py; `f` is the open file).
# Every case gets the common arguments first ($COMMON: small synthetic MNIST-format data, 1 thread).
# Usage: bad_input_test.sh BUILD_DIR SOURCE_DIR [--markdown]
set -u
BUILD_DIR=$1
SOURCE_DIR=$2
CNN=$(realpath "${CNN_BINARY:-$BUILD_DIR/cnn_mpi}")
if [ "${3:-}" = --markdown ]; then
  last_class=""
  md_row() {
    local cell=${6//|/\\|} pat=${5//|/\\|}
    if [ "$1" != "$last_class" ]; then
      last_class=$1
      printf '\n### %s (`tests/bad_input/*%s.cases`)\n\n| case | exit | input (after the common arguments) | stderr matches |\n| --- | ---: | --- | --- |\n' "$2" "$1"
    fi
    printf '| `%s` | %s | `%s` | `%s` |\n' "$3" "$4" "$(trim "$cell")" "$pat"
  }
  trim() { sed 's/^ *//; s/ *$//' <<<"$1"; }
  source <(sed -n '/^for_each_case() {/,/^}/p' "$0")
  for_each_case md_row
  exit 0
fi
PY=/usr/bin/python3   # Debian's python has h5py and numpy
MPIRUN=${MPIEXEC:-mpirun}
[ -x "$CNN" ] || { echo "SKIP: $CNN not built"; exit 77; }
source "$SOURCE_DIR/tools/mpi-env.sh"  # mpirun as root (containers, CI)

# The cases spend most of their time waiting (MPI start-up, mpirun's teardown), not computing: they run
# in BAD_INPUT_WORKERS (default 4) copies of this script, each with its own fixtures, working directory
# and snapshot, taking every WORKERS-th case. The parent prints their logs in order and sums them.
WORKERS=${BAD_INPUT_WORKERS:-4}
WORKER=${BAD_INPUT_WORKER:-}
if [ -z "$WORKER" ] && [ "$WORKERS" -gt 1 ]; then
  LOGS=$(mktemp -d "${TMPDIR:-/tmp}/cnn_bad_input_logs.XXXXXX")
  trap 'rm -rf "$LOGS"' EXIT
  pids=()
  for ((w = 0; w < WORKERS; w++)); do
    BAD_INPUT_WORKER=$w bash "$0" "$@" >"$LOGS/$w" 2>&1 &
    pids+=($!)
  done
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  total=0 failed=0
  for ((w = 0; w < WORKERS; w++)); do
    grep -v ' cases, [0-9]* failed$' "$LOGS/$w"
    read -r n _ f _ < <(grep ' cases, [0-9]* failed$' "$LOGS/$w" || echo "0 cases, 1 failed")
    total=$((total + n)) failed=$((failed + f))
  done
  echo "$total cases, $failed failed ($WORKERS workers)"
  [ -n "${CASES_CLASS:-}" ] || [ "$total" -ge 150 ] || { echo "FAIL - fewer than 150 cases"; exit 1; }
  [ "$failed" -eq 0 ] && [ "$status" -eq 0 ]
  exit
fi
WORKER=${WORKER:-0}
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "SKIP: $PY has no h5py/numpy"; exit 77; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cnn_bad_input.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FX=$WORK/fx          # fixtures: never written by a case
CWD=$WORK/cwd        # each case runs here: a default run directory would appear in it
mkdir -p "$FX" "$CWD"
FAILURES=0
CASES=0

# ---- fixtures -----------------------------------------------------------------------------------
make_fixtures() {
  # Synthetic MNIST-format IDX files: 200 training and 100 test images of 28x28, 10 classes; and
  # idx_small: 150 training and 100 test images of 8x8.
  "$PY" - "$FX/idx" "$FX/idx_small" <<'PYEOF'
import os, struct, sys, random
random.seed(3)
def idx(path, count, rows=None, cols=None):
    with open(path, "wb") as f:
        if rows is None:
            f.write(b"\0\0\x08\x01" + struct.pack(">I", count) + bytes(random.randrange(10) for _ in range(count)))
        else:
            f.write(b"\0\0\x08\x03" + struct.pack(">III", count, rows, cols) +
                    bytes(random.randrange(256) for _ in range(count * rows * cols)))
for d, size, train in ((sys.argv[1], 28, 200), (sys.argv[2], 8, 150)):
    os.makedirs(d)
    idx(d + "/train-images-idx3-ubyte", train, size, size); idx(d + "/train-labels-idx1-ubyte", train)
    idx(d + "/t10k-images-idx3-ubyte", 100, size, size); idx(d + "/t10k-labels-idx1-ubyte", 100)
PYEOF
  # cifar: CIFAR-10 binary batches of 12 records each (label byte + 3x32x32), labels 0..9.
  "$PY" - "$FX/cifar" <<'PYEOF'
import os, random, sys
random.seed(5)
os.makedirs(sys.argv[1])
for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        for _ in range(12):
            f.write(bytes([random.randrange(10)]) + bytes(random.randrange(256) for _ in range(3072)))
PYEOF
  # h5: the idx fixture converted to HDF5 input (train.h5, test.h5) by the project's converter.
  "$(dirname "$CNN")/cnn_convert" --dataset mnist --data "$FX/idx" --out "$FX/h5" >/dev/null 2>&1 ||
    { echo "FAIL - the HDF5 fixture could not be made with cnn_convert"; exit 1; }
  # A finished run (one epoch) and its checkpoint; a run directory whose checkpoints/ is a file.
  "$CNN" "${COMMON[@]}" --out "$FX/run" >/dev/null 2>&1 || { echo "FAIL - the fixture run failed"; exit 1; }
  mkdir -p "$FX/ckpt" "$FX/blocked"
  cp "$FX/run/checkpoints/$(cat "$FX/run/checkpoints/latest")" "$FX/ckpt/good.h5"
  : >"$FX/blocked/checkpoints"
  printf 'just a file\n' >"$FX/plain"
}

# mutate PATH OP [ARG]: changes PATH in place (a fresh copy).
mutate() {
  local path=$1 op=$2 arg=${3:-}
  case $op in
    keep) ;;
    empty) : >"$path" ;;
    delete) rm -rf "$path" ;;
    dir) rm -rf "$path" && mkdir "$path" ;;
    truncate) if [ "${arg#-}" != "$arg" ]; then truncate -s "$(($(stat -c %s "$path") + arg))" "$path"
              else truncate -s "$arg" "$path"; fi ;;
    poke) "$PY" - "$path" "$arg" <<'PYEOF' ;;
import sys
path, spec = sys.argv[1], sys.argv[2]
offset, hexbytes = spec.split(":")
data = bytearray(open(path, "rb").read())
offset = int(offset) % len(data) if int(offset) < 0 else int(offset)
patch = bytes.fromhex(hexbytes)
# A poke always changes the file: where the bytes already hold the patch (the layout moved under a
# fixed offset), their complement is written instead.
if bytes(data[offset:offset + len(patch)]) == patch:
    patch = bytes(b ^ 0xFF for b in patch)
data[offset:offset + len(patch)] = patch
open(path, "wb").write(bytes(data))
PYEOF
    append) "$PY" -c 'import sys; open(sys.argv[1], "ab").write(bytes.fromhex(sys.argv[2]))' "$path" "$arg" ;;
    text) printf '%s' "$arg" >"$path" ;;
    from) cp "$FX/$arg" "$path" ;;
    gzip) gzip -n -c "$path" >"$path.gz.tmp" && mv "$path.gz.tmp" "$path" ;;
    badgzip) printf '\x1f\x8b\x08\x00junk that does not inflate' >"$path" ;;
    fifo) rm -rf "$path" && mkfifo "$path" ;;
    h5|h5seal) "$PY" - "$path" "$arg" <<'PYEOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    exec(sys.argv[2])
PYEOF
      # h5seal:PYTHON: the h5py edit, then the checkpoint's version-2 header recomputed (tests/ckpt_seal.py),
      # so that the checks behind the whole-file digest are reached.
      [ "$op" = h5 ] || "$PY" "$SOURCE_DIR/tests/ckpt_seal.py" "$path" ;;
    *) echo "FAIL - unknown mutation $op"; FAILURES=$((FAILURES + 1)) ;;
  esac
}

# Expands @dir(...) and @file(...) in one argument; prints the result (a fresh copy each time).
expand() {
  local word=$1 spec kind rest
  if [[ $word =~ ^@dir\((.*)\)(.*)$ ]]; then
    spec=${BASH_REMATCH[1]} rest=${BASH_REMATCH[2]}
    IFS=: read -r kind file op arg <<<"$spec"
    local copy
    copy=$(mktemp -d "$FX/case-XXXXXX")/$kind
    cp -r "$FX/$kind" "$copy"
    mutate "$copy/$file" "$op" "$arg"
    echo "$copy$rest"
  elif [[ $word =~ ^@file\((.*)\)(.*)$ ]]; then
    spec=${BASH_REMATCH[1]} rest=${BASH_REMATCH[2]}
    local path=${spec%%:*} op_arg=${spec#*:}
    local op=${op_arg%%:*} arg=""
    [ "$op" != "$op_arg" ] && arg=${op_arg#*:}
    local copy
    copy=$(mktemp -d "$FX/case-XXXXXX")/$(basename "$path")
    cp -r "$FX/$path" "$copy"
    mutate "$copy" "$op" "$arg"
    echo "$copy$rest"
  else
    echo "$word"
  fi
}

# A listing of every file with its hash, of the fixtures and the working directory.
snapshot() { (cd "$WORK" && find fx cwd ! -type f | sort && find fx cwd -type f -print0 | sort -z | xargs -0 sha1sum); }

# ---- one case -----------------------------------------------------------------------------------
# The words of $1, each NUL-terminated: whitespace separates them, except inside @dir(...)/@file(...).
split_words() {
  local s=$1 depth=0 word="" ch i
  for ((i = 0; i < ${#s}; i++)); do
    ch=${s:i:1}
    if [[ $ch == [[:space:]] && $depth -eq 0 ]]; then
      [ -n "$word" ] && printf '%s\0' "$word"
      word=""
      continue
    fi
    [ "$ch" = "(" ] && depth=$((depth + 1))
    [ "$ch" = ")" ] && depth=$((depth - 1))
    word+=$ch
  done
  [ -n "$word" ] && printf '%s\0' "$word"
}

run_case() {
  local name=$1 code=$2 pattern=$3 args=$4
  CASES=$((CASES + 1))
  local words=() expanded=() w
  # Whitespace separates words, except inside @dir(...)/@file(...); $FX and $CNN are substituted.
  mapfile -d '' words < <(split_words "$args")
  words=("${words[@]//\$FX/$FX}")
  words=("${words[@]//\$CNN/$CNN}")
  for w in "${words[@]}"; do
    if [ "$w" = '$COMMON' ]; then expanded+=("${COMMON[@]}"); else expanded+=("$(expand "$w")"); fi
  done
  local launch_env=()
  if [ "${expanded[0]:-}" = env ]; then
    expanded=("${expanded[@]:1}")
    while [[ ${expanded[0]:-} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do
      launch_env+=("${expanded[0]}")
      expanded=("${expanded[@]:1}")
    done
  fi
  local command=(env "${launch_env[@]}" "$CNN" "${COMMON[@]}")
  local mpi=0
  if [ "${expanded[0]:-}" = mpi ]; then
    mpi=1
    command=(env "${launch_env[@]}" "$MPIRUN" --oversubscribe -np "${expanded[1]}" "$CNN" "${COMMON[@]}")
    expanded=("${expanded[@]:2}")
  fi
  # `eval` subcommand: it takes no training options, so it gets none of COMMON's training-only ones.
  if [ "${expanded[0]:-}" = eval ]; then
    command=("${command[@]:0:$((${#command[@]} - ${#COMMON[@]}))}" eval --dataset mnist --data "$FX/idx" --threads 1)
    expanded=("${expanded[@]:1}")
  fi
  local before after
  before=$(snapshot)
  # Nothing the trainer opens may block forever: a case that has not ended after CASE_TIMEOUT s failed.
  (cd "$CWD" && timeout -k 5 "${CASE_TIMEOUT:-60}" "${command[@]}" "${expanded[@]}" </dev/null >"$WORK/out" 2>"$WORK/err")
  local rc=$?
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "    (timed out after ${CASE_TIMEOUT:-60} s: hung)" >>"$WORK/err" 
  after=$(snapshot)
  rm -rf "$FX"/case-*  # this case's copies: the next snapshot hashes only the fixtures
  local problems=()
  [ "$rc" -eq "$code" ] || problems+=("exit $rc, expected $code")
  [ "$rc" -lt 128 ] || problems+=("killed by signal $((rc - 128))")
  local lines
  if [ "$mpi" -eq 1 ]; then lines=$(grep -c '^cnn_mpi:' "$WORK/err"); else lines=$(grep -c '' "$WORK/err"); fi
  [ "$lines" -eq 1 ] || problems+=("$lines stderr lines, expected 1")
  grep -q '^cnn_mpi: error: ' "$WORK/err" || problems+=("no 'cnn_mpi: error:' line")
  grep -qE -- "$pattern" "$WORK/err" || problems+=("no line matches /$pattern/")
  grep -qE 'Sanitizer|runtime error:|LeakSanitizer' "$WORK/err" && problems+=("sanitizer report")
  ls "$CWD"/core* >/dev/null 2>&1 && problems+=("core file")
  [ "$before" = "$after" ] || problems+=("files changed: $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | head -3 | tr '\n' ' ')")
  if [ ${#problems[@]} -eq 0 ]; then
    echo "ok   - $CLASS/$name: exit $rc: $(head -c 160 "$WORK/err" | head -1)"
  else
    FAILURES=$((FAILURES + 1))
    echo "FAIL - $CLASS/$name: ${problems[*]}"
    sed 's/^/    | /' "$WORK/err" | head -6
  fi
}

COMMON=(--dataset mnist --data "$FX/idx" --filters 4 --batch 50 --epochs 1 --threads 1 --quiet --backend threads)
make_fixtures
# A class may need fixtures of its own: tests/bad_input/NN_CLASS.fixtures.sh, sourced here ($FX, $CNN, $PY).
# A hook sets SKIP_CLASSES[CLASS]=REASON when this build cannot run the class (a feature built out).
declare -A SKIP_CLASSES=()
for hook in "$SOURCE_DIR"/tests/bad_input/*.fixtures.sh; do
  [ -e "$hook" ] || continue
  source "$hook" || { echo "FAIL - fixtures of $(basename "$hook")"; exit 1; }
done

# ---- the cases ----------------------------------------------------------------------------------
# tests/bad_input/NN_CLASS.cases (NN orders the classes), one file per class of input: a title line "# TITLE", then rows
# NAME || EXIT || PATTERN (extended regex on stderr) || ARGUMENTS (after $COMMON); "#" lines are comments.
# CASES_CLASS=NAME runs one class only (while working on it). `--markdown` prints docs/BAD_INPUT.md's
# case tables instead of running anything.
trim() { sed 's/^ *//; s/ *$//' <<<"$1"; }
for_each_case() {  # CALLBACK: called as CALLBACK CLASS TITLE NAME EXIT PATTERN ARGUMENTS
  local file class title line name code pattern args
  for file in "$SOURCE_DIR"/tests/bad_input/*.cases; do
    class=$(basename "$file" .cases); class=${class#[0-9][0-9]_}
    [ -n "${CASES_CLASS:-}" ] && [ "$class" != "$CASES_CLASS" ] && continue
    title=$(head -1 "$file" | sed 's/^# *//')
    while IFS= read -r line; do
      [ -z "$(trim "$line")" ] || [ "${line:0:1}" = "#" ] && continue
      name=$(trim "${line%% || *}"); line=${line#* || }
      code=$(trim "${line%% || *}"); line=${line#* || }
      pattern=$(trim "${line%% || *}"); args=${line#* || }
      "$1" "$class" "$title" "$name" "$code" "$pattern" "$args"
    done <"$file"
  done
}
ROW=0
run_row() {  # a worker runs every WORKERS-th case, starting at its own index
  ROW=$((ROW + 1))
  (((ROW - 1) % WORKERS == WORKER)) || return 0
  CLASS=$1
  if [ -n "${SKIP_CLASSES[$CLASS]:-}" ]; then echo "skip - $CLASS/$3: ${SKIP_CLASSES[$CLASS]}"; return 0; fi
  run_case "$3" "$4" "$5" "$6"
}
for_each_case run_row

echo "$CASES cases, $FAILURES failed"
[ -n "${CASES_CLASS:-}" ] || [ "$WORKERS" -gt 1 ] || [ "$CASES" -ge 150 ] || { echo "FAIL - fewer than 150 cases"; exit 1; }
[ "$FAILURES" -eq 0 ]
