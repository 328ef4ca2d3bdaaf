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
# Adding a case is one line of the table at the end: NAME || EXIT || PATTERN || ARGUMENTS. In ARGUMENTS
#   @dir(KIND:FILE:OP[:ARG])   a copy of the fixture directory $FX/KIND with FILE changed by OP
#   @file(PATH:OP[:ARG])       a copy of the fixture file $FX/PATH changed by OP
#   $FX, $CNN                  the fixture root, the binary; (good data in $FX/idx, a finished run in $FX/run, ...)
#   mpi N ...                  (first word) runs under mpirun with N ranks
# OPs (format-independent, so a new format only needs a good fixture, made in make_fixtures):
#   keep, empty, delete, dir (a directory in its place), truncate:N (keep N bytes; negative: drop -N),
#   poke:OFFSET:HEX (overwrite bytes; negative offset from the end), append:HEX, text:STRING,
#   from:PATH (a copy of the fixture $FX/PATH), gzip, badgzip (gzip magic, then junk),
#   h5:PYTHON (edit with h5py; `f` is the open file).
# Every case gets the common arguments first ($COMMON: small synthetic MNIST-format data, 1 thread).
# Usage: bad_input_test.sh BUILD_DIR SOURCE_DIR
set -u
BUILD_DIR=$1
SOURCE_DIR=$2
CNN=$(realpath "${CNN_BINARY:-$BUILD_DIR/cnn_mpi}")
PY=/usr/bin/python3   # Debian's python has h5py and numpy
MPIRUN=${MPIEXEC:-mpirun}
[ -x "$CNN" ] || { echo "SKIP: $CNN not built"; exit 77; }
source "$SOURCE_DIR/tools/mpi-env.sh"  # mpirun as root (containers, CI)
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
data[offset:offset + len(patch)] = patch
open(path, "wb").write(bytes(data))
PYEOF
    append) "$PY" -c 'import sys; open(sys.argv[1], "ab").write(bytes.fromhex(sys.argv[2]))' "$path" "$arg" ;;
    text) printf '%s' "$arg" >"$path" ;;
    from) cp "$FX/$arg" "$path" ;;
    gzip) gzip -n -c "$path" >"$path.gz.tmp" && mv "$path.gz.tmp" "$path" ;;
    badgzip) printf '\x1f\x8b\x08\x00junk that does not inflate' >"$path" ;;
    h5) "$PY" - "$path" "$arg" <<'PYEOF' ;;
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    exec(sys.argv[2])
PYEOF
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
run_case() {
  local name=$1 code=$2 pattern=$3 args=$4
  CASES=$((CASES + 1))
  local words=() expanded=() w
  # Whitespace separates words, except inside @dir(...)/@file(...); $FX and $CNN are substituted.
  mapfile -d '' words < <("$PY" -c '
import sys
s, depth, word, out = sys.argv[1], 0, "", []
for ch in s:
    if ch.isspace() and depth == 0:
        if word: out.append(word)
        word = ""
        continue
    depth += ch == "("
    depth -= ch == ")"
    word += ch
if word: out.append(word)
sys.stdout.write("".join(w + "\0" for w in out))' "$args")
  words=("${words[@]//\$FX/$FX}")
  words=("${words[@]//\$CNN/$CNN}")
  for w in "${words[@]}"; do expanded+=("$(expand "$w")"); done
  local command=("$CNN" "${COMMON[@]}")
  local mpi=0
  if [ "${expanded[0]:-}" = mpi ]; then
    mpi=1
    command=("$MPIRUN" --oversubscribe -np "${expanded[1]}" "$CNN" "${COMMON[@]}")
    expanded=("${expanded[@]:2}")
  fi
  # `eval` subcommand: it takes no training options, so it gets none of COMMON's training-only ones.
  if [ "${expanded[0]:-}" = eval ]; then
    command=("${command[@]:0:$((${#command[@]} - ${#COMMON[@]}))}" eval --dataset mnist --data "$FX/idx" --threads 1)
    expanded=("${expanded[@]:1}")
  fi
  local before after
  before=$(snapshot)
  (cd "$CWD" && "${command[@]}" "${expanded[@]}" </dev/null >"$WORK/out" 2>"$WORK/err")
  local rc=$?
  after=$(snapshot)
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
    echo "ok   - $name: exit $rc: $(head -c 160 "$WORK/err" | head -1)"
  else
    FAILURES=$((FAILURES + 1))
    echo "FAIL - $name: ${problems[*]}"
    sed 's/^/    | /' "$WORK/err" | head -6
  fi
}

COMMON=(--dataset mnist --data "$FX/idx" --filters 4 --batch 50 --epochs 1 --threads 1 --quiet --backend threads)
make_fixtures

# ---- the table ----------------------------------------------------------------------------------
# NAME || EXIT || PATTERN (extended regex on stderr) || ARGUMENTS (after $COMMON)
trim() { sed 's/^ *//; s/ *$//' <<<"$1"; }
while IFS= read -r line; do
  [ -z "$(trim "$line")" ] || [ "${line:0:1}" = "#" ] && continue
  name=$(trim "${line%% || *}"); line=${line#* || }
  code=$(trim "${line%% || *}"); line=${line#* || }
  pattern=$(trim "${line%% || *}"); args=${line#* || }
  run_case "$name" "$code" "$pattern" "$args"
done <<'TABLE'
# command-line values
cli_batch_zero        || 2 || --batch must be at least 1                     || --batch 0
cli_epochs_text       || 2 || --epochs                                       || --epochs abc
cli_filters_huge      || 2 || --filters must be at most                      || --filters 100000
cli_lr_nan            || 2 || --lr must be a positive number                 || --lr nan
cli_momentum_one      || 2 || --momentum must be in                          || --momentum 1
cli_optimizer         || 2 || unknown optimizer 'rmsprop'                    || --optimizer rmsprop
cli_dataset           || 2 || unknown data set 'cifar100'                    || --dataset cifar100
cli_device_backend    || 2 || does not run on --device cpu                   || --device cpu --backend cuda
cli_trace_steps_order || 2 || --trace-steps                                  || --trace t.json --trace-steps 9:3
cli_trace_steps_text  || 2 || --trace-steps                                  || --trace-steps ten:20
cli_keep_zero         || 2 || --keep must be at least 1                      || --keep 0
cli_stall_negative    || 2 || --stall-timeout must be 0                      || --stall-timeout -1
cli_on_nonfinite      || 2 || --on-nonfinite: unknown policy 'ignore'        || --on-nonfinite ignore
cli_unknown_option    || 2 || not expected|unexpected|--no-such              || --no-such-option
cli_checkpoint_train  || 2 || --checkpoint belongs to `eval`                 || --checkpoint x.h5
cli_resume_auto_noout || 2 || --resume auto looks in the run directory       || --resume auto
cli_gpu_absent        || 2 || --device gpu: no usable CUDA device            || --device gpu --backend cuda
cli_mpi_batch_ranks   || 2 || --batch 1 is smaller than the number of ranks  || mpi 2 --batch 1
# IDX data files
idx_dir_missing       || 3 || data directory does not exist                  || --data $FX/nowhere
idx_dir_is_file       || 3 || data directory is not a directory              || --data $FX/plain
idx_labels_missing    || 3 || train-labels-idx1-ubyte: file does not exist   || --data @dir(idx:train-labels-idx1-ubyte:delete)
idx_images_is_dir     || 3 || train-images-idx3-ubyte                        || --data @dir(idx:train-images-idx3-ubyte:dir)
idx_empty             || 2 || train-images-idx3-ubyte: empty file            || --data @dir(idx:train-images-idx3-ubyte:empty)
idx_bad_magic         || 2 || train-images-idx3-ubyte: .*magic               || --data @dir(idx:train-images-idx3-ubyte:poke:0:ffff)
idx_float_type        || 2 || train-images-idx3-ubyte: .*type                || --data @dir(idx:train-images-idx3-ubyte:poke:2:0d)
idx_wrong_dims        || 2 || train-images-idx3-ubyte: has 2 dimensions      || --data @dir(idx:train-images-idx3-ubyte:poke:3:02)
idx_zero_count        || 2 || train-images-idx3-ubyte: dimension 0 is zero   || --data @dir(idx:train-images-idx3-ubyte:poke:4:00000000)
idx_truncated         || 2 || train-images-idx3-ubyte: truncated             || --data @dir(idx:train-images-idx3-ubyte:truncate:-100)
idx_trailing          || 2 || train-images-idx3-ubyte: trailing bytes        || --data @dir(idx:train-images-idx3-ubyte:append:00)
idx_huge_dims         || 2 || train-images-idx3-ubyte: .*(limit|overflow)    || --data @dir(idx:train-images-idx3-ubyte:poke:4:ffffffffffffffffffffffff)
idx_label_range       || 2 || t10k-labels-idx1-ubyte: label 200              || --data @dir(idx:t10k-labels-idx1-ubyte:poke:-1:c8)
idx_count_mismatch    || 2 || holds 200 images but .* 150 labels || --data @dir(idx:train-labels-idx1-ubyte:from:idx_small/train-labels-idx1-ubyte)
idx_bad_gzip          || 2 || corrupt gzip stream|truncated gzip stream      || --data @dir(idx:t10k-images-idx3-ubyte:badgzip)
idx_test_size_differs || 2 || t10k-images-idx3-ubyte: images are 8x8 || --data @dir(idx:t10k-images-idx3-ubyte:from:idx_small/t10k-images-idx3-ubyte)
# checkpoints, through eval and through --resume PATH
ckpt_missing          || 3 || cannot open checkpoint: No such file           || eval --checkpoint $FX/ckpt/none.h5
ckpt_is_dir           || 3 || ckpt: cannot open checkpoint: Is a directory                                         || eval --checkpoint $FX/ckpt
ckpt_text             || 2 || not an HDF5 file                               || eval --checkpoint @file(ckpt/good.h5:text:hello)
ckpt_empty            || 2 || not an HDF5 file|cannot be read as HDF5        || eval --checkpoint @file(ckpt/good.h5:empty)
ckpt_truncated        || 2 || cannot be read as HDF5                         || eval --checkpoint @file(ckpt/good.h5:truncate:4000)
ckpt_format           || 2 || not a cnn_mpi checkpoint                       || eval --checkpoint @file(ckpt/good.h5:h5:f.attrs["format"] = "other")
ckpt_version          || 2 || unsupported checkpoint version 9               || eval --checkpoint @file(ckpt/good.h5:h5:f.attrs["version"] = np.int64(9))
ckpt_missing_dataset  || 2 || missing dataset /model/fc/weight               || eval --checkpoint @file(ckpt/good.h5:h5:del f["/model/fc/weight"])
ckpt_wrong_shape      || 2 || /model/conv1/bias has shape \[3\]              || eval --checkpoint @file(ckpt/good.h5:h5:del f["/model/conv1/bias"]; f["/model/conv1/bias"] = np.zeros(3, np.float32))
ckpt_wrong_type       || 2 || wrong datatype                                 || eval --checkpoint @file(ckpt/good.h5:h5:del f["/model/fc/bias"]; f["/model/fc/bias"] = np.zeros(10))
ckpt_checksum         || 2 || checksum mismatch in /model/fc/weight          || eval --checkpoint @file(ckpt/good.h5:h5:f["/model/fc/weight"][0, 0] += 1)
ckpt_missing_attr     || 2 || missing attribute 'epoch'                      || eval --checkpoint @file(ckpt/good.h5:h5:del f["/progress"].attrs["epoch"])
ckpt_negative_filters || 2 || /config filters -4 is out of range                                || eval --checkpoint @file(ckpt/good.h5:h5:f["/config"].attrs["filters"] = np.int64(-4))
ckpt_eval_other_data  || 2 || the model takes 1x28x28 images                 || eval --checkpoint $FX/ckpt/good.h5 --data $FX/idx_small
ckpt_huge_model       || 2 || describes a model of more than 2\^31 parameters || eval --checkpoint @file(ckpt/good.h5:h5:f["/config"].attrs["input_shape"] = np.array([1, 4000, 4000]); f["/config"].attrs["filters"] = np.int64(4096))
ckpt_resume_is_dir    || 3 || Is a directory || --resume $FX/run/checkpoints --out $FX/new_run
resume_missing        || 3 || cannot open checkpoint                         || --resume $FX/ckpt/none.h5 --out $FX/new_run
resume_truncated      || 2 || cannot be read as HDF5                         || --resume @file(ckpt/good.h5:truncate:-2000) --out $FX/new_run
resume_other_filters  || 2 || cannot resume from .*model was 'conv3x3:4 relu maxpool2 fc:10', this run has 'conv3x3:8 || --resume $FX/ckpt/good.h5 --filters 8 --out $FX/new_run
resume_other_seed     || 2 || cannot resume from .*seed was 1, this run has 7 || --resume $FX/ckpt/good.h5 --seed 7 --out $FX/new_run
# CIFAR-10 binary
cifar_missing_batch   || 3 || data_batch_3.bin                               || --dataset cifar10 --data @dir(cifar:data_batch_3.bin:delete)
cifar_empty_batch     || 2 || data_batch_2.bin: .*empty                      || --dataset cifar10 --data @dir(cifar:data_batch_2.bin:empty)
cifar_partial_record  || 2 || data_batch_1.bin: .*(truncated|3073)           || --dataset cifar10 --data @dir(cifar:data_batch_1.bin:truncate:-5)
cifar_bad_label       || 2 || test_batch.bin: .*label 11                     || --dataset cifar10 --data @dir(cifar:test_batch.bin:poke:0:0b)
# HDF5 input
h5_not_hdf5           || 2 || train.h5: not an HDF5 file                     || --dataset hdf5 --data @dir(h5:train.h5:text:hello)
h5_truncated          || 2 || train.h5: cannot be read as HDF5               || --dataset hdf5 --data @dir(h5:train.h5:truncate:3000)
h5_missing_test       || 3 || test.h5: file does not exist                   || --dataset hdf5 --data @dir(h5:test.h5:delete)
h5_float_images       || 2 || train.h5: wrong datatype: /images              || --dataset hdf5 --data @dir(h5:train.h5:h5:del f["/images"]; f["/images"] = np.zeros((200, 1, 28, 28), np.float32))
h5_count_mismatch     || 2 || train.h5: sample counts disagree               || --dataset hdf5 --data @dir(h5:train.h5:h5:del f["/labels"]; f["/labels"] = np.zeros(199, np.uint8))
h5_bad_label_stream   || 2 || train.h5: label 10 at index 3                  || --dataset hdf5 --data-mode stream --data @dir(h5:train.h5:h5:f["/labels"][3] = 10)
h5_missing_path       || 2 || missing dataset /pixels                        || --dataset hdf5 --data $FX/h5 --h5-images /pixels
h5_stream_needs_h5    || 2 || data-mode stream needs --dataset hdf5          || --data-mode stream
# --model SPEC and Adam
model_unknown_token   || 2 || token 1 'conv9': expected                      || --model conv9
model_last_not_classes || 2 || one output per class: fc:10                   || --model fc:7
model_kernel_too_big  || 2 || 29x29 kernel does not fit its 1x28x28 input    || --model conv29x29:4
model_zero_stride     || 2 || token 1 'maxpool2/s0': the stride must be      || --model maxpool2/s0
optimizer_beta1_one   || 2 || --beta1 must be in                             || --optimizer adam --beta1 1
# run directories
run_holds_run         || 2 || already holds a run                            || --out $FX/run
run_out_is_file       || 3 || plain                                          || --out $FX/plain
run_out_under_file    || 3 || plain                                          || --out $FX/plain/run
run_out_proc          || 3 || not writable|cannot create|ot a directory      || --out /proc/cnn_mpi_run
run_checkpoints_file  || 3 || checkpoints                                    || --out $FX/blocked
run_resume_other_run  || 2 || cannot resume from .*model was 'conv3x3:4 relu maxpool2 fc:10', this run has 'conv3x3:8 || --resume auto --out $FX/run --filters 8
run_mpi_one_rank_data || 3 || data directory does not exist                  || mpi 1 --out $FX/mpmd : -np 1 $CNN --data $FX/nowhere --out $FX/mpmd
TABLE

echo "$CASES cases, $FAILURES failed"
[ "$CASES" -ge 30 ] || { echo "FAIL - fewer than 30 cases"; exit 1; }
[ "$FAILURES" -eq 0 ]
