#!/bin/bash
# --config FILE.toml and RUN_DIR/config.toml with real runs (docs/CONFIG.md):
#   1. A run from a config file plus command-line overrides: the command line wins, and RUN_DIR/config.toml
#      holds the resolved settings, the version and the commit.
#   2. `--config RUN_DIR/config.toml --out NEW` repeats the run: the same settings file (but `out`) and
#      bitwise the same final checkpoint; under mpirun with 2 ranks, rank 0 alone writes it.
#   3. A resume keeps config.toml and writes its own settings to config.resume-1.toml.
# In a build without toml++ (CNN_ENABLE_CONFIG_FILE), --config is refused with one line and config.toml
# is still written.
# Usage: config_file_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"

body() { grep -v '^#' "$1" | grep -v '^out = '; }  # the settings, without the comments and the run directory

if ! "$CNN" --version | grep -q "config files: toml++"; then
  echo "this build reads no config files: $("$CNN" --version)"
  printf 'epochs = 2\n' >"$WORK/c.toml"
  run_as refused "$CNN" "${SMALL[@]}" --config "$WORK/c.toml" --out "$WORK/refused"
  expect_rc refused "$EXIT_USAGE"
  expect_grep refused "$WORK/refused.err" "this build has no config-file support"
  [ "$(grep -c '' "$WORK/refused.err")" -eq 1 ] && pass "refused: one line" || fail "refused: not one stderr line"
  run_as plain "$CNN" "${SMALL[@]}" --epochs 1 --out "$WORK/plain"
  expect_rc plain 0
  expect_grep plain "$WORK/plain/config.toml" "^epochs = 1$"
  finish
fi

# --- 1. settings from a file, overridden on the command line
cat >"$WORK/study.toml" <<'EOF'
# a study's common settings
epochs = 2
lr = 0.5            # overridden below
optimizer = "momentum"
momentum = 0.8
seed = 11
checkpoint-every-steps = 7
EOF
run_as first "$CNN" "${SMALL[@]}" --config "$WORK/study.toml" --lr 0.05 --out "$WORK/first"
expect_rc first 0
for line in '^lr = 0.05$' '^epochs = 2$' '^momentum = 0.8$' '^seed = 11$' '^checkpoint-every-steps = 7$' \
  '^quiet = true$' '^command = "train"$' "^out = \"$WORK/first\"$" '^backend = "threads"$' '^threads = 1$' \
  "^# version: [0-9]+\.[0-9]+\.[0-9]+$" '^# commit: ([0-9a-f]{12}(\+dirty)?|unknown)$' ', fresh\.$'; do
  if grep -qE -- "$line" "$WORK/first/config.toml"; then pass "config.toml: /$line/"
  else fail "config.toml lacks /$line/"; sed 's/^/    | /' "$WORK/first/config.toml" | head -12; fi
done
expect_grep first "$WORK/first.out" "config_file: $WORK/study.toml"

# --- 2. the written file repeats the run
run_as again "$CNN" --config "$WORK/first/config.toml" --out "$WORK/again"
expect_rc again 0
if diff <(body "$WORK/first/config.toml") <(body "$WORK/again/config.toml") >"$WORK/diff"; then
  pass "--config RUN_DIR/config.toml: the same settings"
else fail "the repeated run's settings differ:"; sed 's/^/    | /' "$WORK/diff"; fi
same_bits "the repeated run's final checkpoint" "$(latest "$WORK/first")" "$(latest "$WORK/again")"
run_as two_ranks mpi 2 "$CNN" --config "$WORK/first/config.toml" --out "$WORK/two" --epochs 1
expect_rc two_ranks 0
expect_grep two_ranks "$WORK/two/config.toml" ", a start at .* on 2 ranks, fresh"
[ "$(ls "$WORK/two" | grep -c '^config')" -eq 1 ] && pass "two ranks: one settings file" || fail "two ranks: $(ls "$WORK/two")"

# --- 3. a resume writes beside it
before=$(sha1sum <"$WORK/first/config.toml")
run_as resumed "$CNN" --config "$WORK/first/config.toml" --resume auto --epochs 3
expect_rc resumed 0
[ "$(sha1sum <"$WORK/first/config.toml")" = "$before" ] && pass "resume: config.toml kept" || fail "resume: config.toml changed"
expect_grep resumed "$WORK/first/config.resume-1.toml" '^epochs = 3$'
expect_grep resumed "$WORK/first/config.resume-1.toml" '^resume = "auto"$'
expect_grep resumed "$WORK/first/config.resume-1.toml" "resumed from $WORK/first/checkpoints/ckpt-e0002-"
finish
