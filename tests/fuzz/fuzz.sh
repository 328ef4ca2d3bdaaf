#!/bin/bash
# Runs one libFuzzer target for SECONDS on a scratch corpus seeded from SEED_DIR (the committed seeds
# are never written). Exit 0: no crash, leak, escaped exception or slow input; else libFuzzer's code.
# Usage: fuzz.sh TARGET SEED_DIR SECONDS [extra libFuzzer flags]
set -u
target=$1 seeds=$2 seconds=$3
# Targets that write files (HDF5, run directories) run ~50x faster on tmpfs, where fsync is free.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
shift 3
scratch=$(mktemp -d "${TMPDIR:-/tmp}/cnn-fuzz-corpus.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
[ -d "$seeds" ] || { echo "no seed corpus at $seeds"; exit 1; }
# -timeout: an input taking over 10 s is a hang. -rss_limit_mb: an input that allocates without bound
# is a bug (the readers must check sizes first). Findings go to the working directory (crash-*, leak-*).
"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$@" "$scratch" "$seeds" 2>&1 |
  grep -v "^#[0-9]*	\(NEW\|REDUCE\|pulse\)" | tail -40
exit "${PIPESTATUS[0]}"
