#!/bin/bash
# Exact resume (docs/CHECKPOINT.md, "Resuming"): a run stopped at an epoch boundary or in the middle
# of an epoch and resumed ends with a final checkpoint whose datasets are bitwise those of an
# uninterrupted run; resumed on another rank count, within 1e-5; --resume auto skips a corrupt newest
# file; refused and allowed changes of settings; a finished run is a no-op; a cosine schedule with the
# regularisers resumes bitwise and refuses other --epochs; an older checkpoint still resumes; dropout's
# masks resume too; so do --augment and bn's running statistics, which eval uses.
# Usage: resume_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"

# stop_resume_same NAME STEPS EPOCHS ARGS...: an uninterrupted run (NAMEref), a run of the same
# settings stopped by the test hook after STEPS steps (NAME1: exit 5, its checkpoint) and its resume
# (NAME), which ends bitwise as the uninterrupted one.
stop_resume_same() {
  local name=$1 steps=$2 epochs=$3
  shift 3
  run_as "${name}ref" "$CNN" "${SMALL[@]}" "$@" --epochs "$epochs" --out "$WORK/${name}ref"
  expect_rc "${name}ref" 0
  run_as "${name}1" env CNN_TEST_STOP_AFTER_STEPS="$steps" "$CNN" "${SMALL[@]}" "$@" --epochs "$epochs" \
    --out "$WORK/$name"
  expect_rc "${name}1" "$EXIT_STOPPED"
  run_as "$name" "$CNN" "${SMALL[@]}" "$@" --epochs "$epochs" --out "$WORK/$name" --resume auto
  expect_rc "$name" 0
  same_bits "$name: mid-epoch resume" "$(latest "$WORK/${name}ref")" "$(latest "$WORK/$name")"
}

# The reference: 3 epochs, uninterrupted, one rank.
run_as ref "$CNN" "${SMALL[@]}" --epochs 3 --out "$WORK/ref"
expect_rc ref 0
REF=$(latest "$WORK/ref")
expect_grep ref "$WORK/ref/runs.log" "slurm_job=-, restart=0, ranks=1, resumed_from=fresh"

# Stopped at an epoch boundary (a run of 1 epoch), continued to 3.
run_as boundary1 "$CNN" "${SMALL[@]}" --epochs 1 --out "$WORK/boundary"
run_as boundary "$CNN" "${SMALL[@]}" --epochs 3 --out "$WORK/boundary" --resume auto
expect_rc boundary 0
expect_grep boundary "$WORK/boundary.out" "resume: epochs 1 -> 3"
same_bits "epoch-boundary resume" "$REF" "$(latest "$WORK/boundary")"
expect_grep boundary "$WORK/boundary/runs.log" "resumed_from=.*ckpt-e0001-s00000020.h5"

# Stopped in the middle of epoch 2 (test hook: SIGUSR1 after 27 steps), with step checkpoints too.
run_as mid1 env CNN_TEST_STOP_AFTER_STEPS=27 "$CNN" "${SMALL[@]}" --epochs 3 --checkpoint-every-steps 10 \
  --out "$WORK/mid"
expect_rc mid1 "$EXIT_STOPPED"
expect_grep mid1 "$WORK/mid1.err" "^stopped by SIGUSR1 at epoch 2 step 7; checkpoint .*ckpt-e0001-s00000027.h5"
[ "$(wc -l <"$WORK/mid1.err")" -eq 1 ] && pass "mid1: one line on stderr" || fail "mid1: stderr not one line"
run_as mid "$CNN" "${SMALL[@]}" --epochs 3 --checkpoint-every-steps 10 --out "$WORK/mid" --resume auto
expect_rc mid 0
same_bits "mid-epoch resume" "$REF" "$(latest "$WORK/mid")"
# metrics.csv: each epoch once, and epoch 2's train loss (half before the stop) as uninterrupted.
if [ "$(cut -d, -f1 "$WORK/mid/metrics.csv" | tr '\n' ' ')" = "epoch 1 2 3 " ]; then pass "mid: metrics rows 1 2 3"
else fail "mid: metrics rows: $(cut -d, -f1 "$WORK/mid/metrics.csv" | tr '\n' ' ')"; fi
if "$PY" - "$WORK/ref/metrics.csv" "$WORK/mid/metrics.csv" <<'PYEOF'
import csv, sys
a, b = ([float(r["train_loss"]) for r in csv.DictReader(open(p))] for p in sys.argv[1:3])
sys.exit(0 if len(a) == len(b) and all(abs(x - y) <= 1e-12 * abs(x) for x, y in zip(a, b)) else 1)
PYEOF
then pass "mid: train losses as uninterrupted"; else fail "mid: train losses differ"; fi

# Another rank count, same global batch: 4 -> 2 and 1 -> 3, each compared with an uninterrupted run on
# the rank count it started with. (Runs on 1 and 4 ranks drift apart by ~1e-3 over 3 epochs on
# their own: summation order differences grow with training; that is not the resume's doing.)
run_as np4ref mpi 4 "$CNN" "${SMALL[@]}" --epochs 2 --out "$WORK/np4ref"
expect_rc np4ref 0
run_as np4 mpi 4 "$CNN" "${SMALL[@]}" --epochs 1 --out "$WORK/np4"
expect_rc np4 0
run_as np4to2 mpi 2 "$CNN" "${SMALL[@]}" --epochs 2 --out "$WORK/np4" --resume auto
expect_rc np4to2 0
expect_grep np4to2 "$WORK/np4to2.out" "saved by 4 rank(s)"
close_to "resume 4 -> 2 ranks" "$(latest "$WORK/np4ref")" "$(latest "$WORK/np4")"
mkdir -p "$WORK/np1/checkpoints"
cp "$WORK/boundary/checkpoints/ckpt-e0001-s00000020.h5" "$WORK/np1/checkpoints/"
run_as np1to3 mpi 3 "$CNN" "${SMALL[@]}" --epochs 3 --out "$WORK/np1" --resume auto
expect_rc np1to3 0
close_to "resume 1 -> 3 ranks" "$REF" "$(latest "$WORK/np1")"

# --resume auto: a corrupt newest checkpoint is skipped with one warning; the one before is used.
cp -r "$WORK/ref" "$WORK/corrupt"
NEWEST=$(latest "$WORK/corrupt")
"$PY" - "$NEWEST" <<'PYEOF'
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    offset = f["/model/fc/weight"].id.get_offset()
with open(sys.argv[1], "r+b") as f:
    f.seek(offset + 100)
    b = f.read(4)
    f.seek(offset + 100)
    f.write(bytes(x ^ 0xFF for x in b))
PYEOF
run_as corrupt "$CNN" "${SMALL[@]}" --epochs 3 --out "$WORK/corrupt" --resume auto
expect_rc corrupt 0
expect_grep corrupt "$WORK/corrupt.err" "^warning: skipping unreadable checkpoint: .*ckpt-e0003-s00000060.h5: checksum mismatch"
expect_grep corrupt "$WORK/corrupt.out" "resume: from .*ckpt-e0002-s00000040.h5"
same_bits "auto after a corrupt newest" "$REF" "$(latest "$WORK/corrupt")"

# --resume auto with nothing to resume starts fresh and says so.
run_as fresh "$CNN" "${SMALL[@]}" --epochs 1 --out "$WORK/fresh" --resume auto
expect_rc fresh 0
expect_grep fresh "$WORK/fresh.out" "no valid checkpoint in .*, starting fresh"

# A finished run: nothing to do, exit 0 (SLURM requeue scripts rely on it).
run_as complete "$CNN" "${SMALL[@]}" --epochs 3 --out "$WORK/ref" --resume auto
expect_rc complete 0
expect_grep complete "$WORK/complete.out" "^run already complete (epoch 3 of 3)"

# Settings: the model shape (and seed, batch, optimizer, data) must match; lr may change.
E1="$WORK/boundary/checkpoints/ckpt-e0001-s00000020.h5"
run_as shape "$CNN" "${SMALL[@]}" --filters 16 --epochs 2 --out "$WORK/shape" --resume "$E1"
expect_rc shape "$EXIT_USAGE"
expect_grep shape "$WORK/shape.err" "model was 'conv3x3:8 relu maxpool2 fc:10', this run has 'conv3x3:16 relu maxpool2 fc:10'"
run_as seed "$CNN" "${SMALL[@]}" --seed 7 --epochs 2 --out "$WORK/seed" --resume "$E1"
expect_rc seed "$EXIT_USAGE"
expect_grep seed "$WORK/seed.err" "seed was 1, this run has 7"
run_as batch "$CNN" "${SMALL[@]}" --batch 200 --epochs 2 --out "$WORK/batch" --resume "$E1"
expect_rc batch "$EXIT_USAGE"
expect_grep batch "$WORK/batch.err" "global batch was 100, this run has 200"
run_as lr "$CNN" "${SMALL[@]}" --lr 0.05 --epochs 2 --out "$WORK/lr" --resume "$E1"
expect_rc lr 0
expect_grep lr "$WORK/lr.out" "^resume: lr 0.1 -> 0.05"
expect_grep lr "$WORK/lr.out" "^resume: out .*boundary -> .*lr"

# Adam on a general network (run layer by layer): stopped mid-epoch, resumed, bitwise equal to
# an uninterrupted run (m, v and the step count travel in the checkpoint); another network is refused.
ADAM=(--model "conv3x3:4/p1 relu maxpool2/s3 fc:16 relu fc:10" --optimizer adam --lr 0.002)
stop_resume_same adam 13 2 "${ADAM[@]}"
run_as adamspec "$CNN" "${SMALL[@]}" "${ADAM[@]}" --model "conv3x3:4/p1 relu fc:10" --epochs 2 --out "$WORK/adamspec" \
  --resume "$(latest "$WORK/adamref")"
expect_rc adamspec "$EXIT_USAGE"
expect_grep adamspec "$WORK/adamspec.err" "model was 'conv3x3:4/p1 relu maxpool2/s3 fc:16 relu fc:10', this run has 'conv3x3:4/p1 relu fc:10'"

# A checkpoint written before the options of docs/TRAINING.md existed (their /config attributes
# removed, the header resealed) still resumes, with their defaults, to the same bits.
ADAM_MID="$WORK/adam/checkpoints/ckpt-e0000-s00000013.h5"
mkdir -p "$WORK/adamold/checkpoints"
cp "$ADAM_MID" "$WORK/adamold/checkpoints/"
"$PY" - "$WORK/adamold/checkpoints/ckpt-e0000-s00000013.h5" <<'PYEOF'
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    for name in ("lr_schedule", "warmup_steps", "total_steps", "weight_decay", "nesterov", "label_smoothing"):
        del f["/config"].attrs[name]
PYEOF
"$PY" "$SOURCE_DIR/tests/ckpt_seal.py" "$WORK/adamold/checkpoints/ckpt-e0000-s00000013.h5"
run_as adamold "$CNN" "${SMALL[@]}" "${ADAM[@]}" --epochs 2 --out "$WORK/adamold" --resume auto
expect_rc adamold 0
same_bits "resume of a checkpoint without the new /config keys" "$(latest "$WORK/adamref")" "$(latest "$WORK/adamold")"

# A cosine schedule with warm-up, weight decay, Nesterov momentum and label smoothing: stopped in the
# middle of epoch 1, resumed, bitwise the uninterrupted run (each step's lr is a function of its global
# step); another --epochs is refused, naming the schedule (its lr depends on the run's total steps),
# where a step schedule allows it.
SCHED=(--lr-schedule cosine --warmup-steps 7 --weight-decay 5e-4 --nesterov --label-smoothing 0.1)
stop_resume_same cos 13 2 "${SCHED[@]}"
# The schedule reaches the update: the same run with a constant lr ends elsewhere.
run_as cosflat "$CNN" "${SMALL[@]}" "${SCHED[@]}" --lr-schedule constant --epochs 2 --out "$WORK/cosflat"
expect_rc cosflat 0
if "$PY" "$COMPARE" exact "$(latest "$WORK/cosref")" "$(latest "$WORK/cosflat")" >/dev/null 2>&1; then
  fail "cosine and constant runs end with the same bits: the schedule never reached the update"
else pass "cosine and constant runs differ"; fi
run_as cosepochs "$CNN" "${SMALL[@]}" "${SCHED[@]}" --epochs 3 --out "$WORK/cosepochs" --resume "$(latest "$WORK/cos")"
expect_rc cosepochs "$EXIT_USAGE"
expect_grep cosepochs "$WORK/cosepochs.err" "--lr-schedule cosine's total steps was 40 (--epochs 2), this run has 60 (--epochs 3)"
run_as cosdecay "$CNN" "${SMALL[@]}" "${SCHED[@]}" --weight-decay 1e-3 --epochs 3 --out "$WORK/cosdecay" \
  --resume "$(latest "$WORK/cos")"
expect_rc cosdecay "$EXIT_USAGE"
expect_grep cosdecay "$WORK/cosdecay.err" "weight decay was 0.0005, this run has 0.001"
run_as steps1 "$CNN" "${SMALL[@]}" --lr-schedule step:1 --epochs 1 --out "$WORK/steps"
run_as steps "$CNN" "${SMALL[@]}" --lr-schedule step:1 --epochs 2 --out "$WORK/steps" --resume auto
expect_rc steps 0
expect_grep steps "$WORK/steps.out" "resume: epochs 1 -> 2"

# Dropout (its masks a pure function of seed, global step and sample) and average pooling: stopped
# mid-epoch, resumed, bitwise equal to an uninterrupted run; the model with dropout:0.5 is not that
# with dropout:0.25 (the canonical spec keeps P).
DROP=(--model "conv3x3:4/p1 relu dropout:0.25 avgpool2 fc:16 relu dropout:.5 fc:10")
stop_resume_same drop 13 2 "${DROP[@]}"
run_as dropspec "$CNN" "${SMALL[@]}" --model "conv3x3:4/p1 relu dropout:0.5 avgpool2 fc:16 relu dropout:.5 fc:10" \
  --epochs 2 --out "$WORK/dropspec" --resume "$(latest "$WORK/dropref")"
expect_rc dropspec "$EXIT_USAGE"
expect_grep dropspec "$WORK/dropspec.err" "model was 'conv3x3:4/p1 relu dropout:0.25 avgpool2 fc:16 relu dropout:0.5 fc:10'"

# Augmentation (--augment; each sample's crop and flip a pure function of seed, global step and its
# place in the global batch): stopped in the middle of epoch 2, resumed, bitwise equal to an
# uninterrupted run; the augmentation reaches the batches (a run without it ends elsewhere); another
# --augment is refused; a checkpoint without the /config augment key resumes as "none".
AUG=(--augment crop:3,flip)
stop_resume_same aug 27 2 "${AUG[@]}"
expect_grep augref "$WORK/augref.out" "augment: crop:3,flip"
run_as augoff "$CNN" "${SMALL[@]}" --epochs 2 --out "$WORK/augoff"
if "$PY" "$COMPARE" exact "$(latest "$WORK/augref")" "$(latest "$WORK/augoff")" >/dev/null 2>&1; then
  fail "augmented and plain runs end with the same bits: the augmentation never reached the batches"
else pass "augmented and plain runs differ"; fi
run_as augchange "$CNN" "${SMALL[@]}" --augment flip --epochs 3 --out "$WORK/augchange" \
  --resume "$(latest "$WORK/augref")"
expect_rc augchange "$EXIT_USAGE"
expect_grep augchange "$WORK/augchange.err" "augment was crop:3,flip, this run has flip"
mkdir -p "$WORK/augold/checkpoints"
cp "$WORK/boundary/checkpoints/ckpt-e0001-s00000020.h5" "$WORK/augold/checkpoints/"
"$PY" - "$WORK/augold/checkpoints/ckpt-e0001-s00000020.h5" <<'PYEOF'
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    del f["/config"].attrs["augment"]
PYEOF
"$PY" "$SOURCE_DIR/tests/ckpt_seal.py" "$WORK/augold/checkpoints/ckpt-e0001-s00000020.h5"
run_as augold "$CNN" "${SMALL[@]}" --epochs 3 --out "$WORK/augold" --resume auto
expect_rc augold 0
same_bits "resume of a checkpoint without /config augment" "$REF" "$(latest "$WORK/augold")"

# Batch norm: its running statistics (/state/bn_running, compared with every other dataset) are in
# the checkpoint, so a run stopped mid-epoch and resumed on 2 threads ends bitwise equal to an
# uninterrupted one; eval normalises with them: its test loss is the one the run logged for epoch 2
# (the batch's own statistics would give another).
BN=(--model "conv3x3:4/p1 bn relu maxpool2 res[conv3x3:4/p1 bn relu conv3x3:4/p1 bn] fc:16 bn fc:10" --threads 2)
stop_resume_same bn 13 2 "${BN[@]}"
if "$PY" - "$(latest "$WORK/bnref")" <<'PYEOF'
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    running = f["/state/bn_running"][()]
    assert f["/state"].attrs["count"] == running.size == 2 * (4 + 4 + 4 + 16), running.size
    assert (running[:4] != 0).all() and (running[4:8] != 1).all(), running[:8]  # moved from 0 and 1
PYEOF
then pass "bn: /state/bn_running holds the moved running statistics"; else fail "bn: /state/bn_running"; fi
run_as bneval "$CNN" eval --checkpoint "$(latest "$WORK/bnref")" --data "$DATA" --test-samples 500 --threads 2
expect_rc bneval 0
LOGGED=$(awk -F, '$1 == 2 { printf "%.6f", $3 }' "$WORK/bnref/metrics.csv")
expect_grep bneval "$WORK/bneval.out" "test_loss $LOGGED "
# --bn-local is another computation: a resume refuses the change.
run_as bnlocal "$CNN" "${SMALL[@]}" "${BN[@]}" --bn-local --epochs 3 --out "$WORK/bnlocal" --resume "$(latest "$WORK/bnref")"
expect_rc bnlocal "$EXIT_USAGE"
expect_grep bnlocal "$WORK/bnlocal.err" "bn statistics was global, this run has local (--bn-local)"

# An existing run directory is refused without --resume (its logs are never overwritten).
run_as again "$CNN" "${SMALL[@]}" --epochs 1 --out "$WORK/ref"
expect_rc again "$EXIT_USAGE"

finish
