#!/usr/bin/env bash
# install_test.sh BUILD_DIR SOURCE_DIR: cnn_mpi installed like cluster software.
#  (a) `cmake --install BUILD_DIR --prefix P` installs P/bin/{cnn_mpi,cnn_convert,cnn_peak}, the job
#      scripts in P/share/cnn_mpi/jobs and README.md with docs/ in P/share/doc/cnn_mpi;
#  (b) the installed programs need nothing of the build or source tree: ldd resolves every library,
#      and neither their RUNPATH nor a resolved library lies under BUILD_DIR or SOURCE_DIR;
#  (c) the prefix is then moved (an installation copied onto a shared file system), and, from a
#      directory outside the checkout and with no cnn_mpi on PATH:
#      - the installed cnn_mpi trains a 1-epoch run;
#      - each installed job script's DRY_RUN line names the installed binary, also when submitted
#        from a directory that holds a build/cnn_mpi of its own;
#      - the installed CPU script, run as a plain shell script (LAUNCHER=mpirun, no SLURM), trains
#        2 ranks through the installed binary;
#  (d) the checkout's own scripts still take the submit directory's build/cnn_mpi.
# Needs Fashion-MNIST (/usr/share/datasets/fashion-mnist; tools/install-deps.sh), else skipped (77).
# About 5 s.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 2
fi
BUILD_DIR=$(cd "$1" && pwd)
SOURCE_DIR=$(cd "$2" && pwd)
DATA=/usr/share/datasets/fashion-mnist

T0=$SECONDS
say() { printf '[install_test %2ds] %s\n' $((SECONDS - T0)) "$*"; }
fail() {
  say "FAIL: $*"
  exit 1
}
[[ -d $DATA ]] || { say "SKIP: $DATA missing (tools/install-deps.sh)"; exit 77; }

# Nothing of the caller's allocation may reach the scripts' DRY_RUN lines.
while read -r name; do unset "$name"; done < <(compgen -e | grep '^SLURM_')
unset CNN_BIN CNN_JOBS_DIR CNN_OUT LAUNCHER
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

WORK=$(mktemp -d /tmp/cnn-install-test.XXXXXX)
trap 'rc=$?; if ((rc == 0)); then rm -rf "$WORK"; else say "work directory kept: $WORK"; fi' EXIT

# ------------------------------------------------------------------------------- (a) the install
say "(a) cmake --install $BUILD_DIR --prefix $WORK/staged"
cmake --install "$BUILD_DIR" --prefix "$WORK/staged" >"$WORK/install.log" 2>&1 ||
  { cat "$WORK/install.log"; fail "(a) cmake --install failed"; }
expected=(bin/cnn_mpi bin/cnn_convert bin/cnn_peak
  share/cnn_mpi/jobs/train-cpu.sbatch share/cnn_mpi/jobs/train-gpu.sbatch
  share/cnn_mpi/jobs/train-preemptible.sbatch share/cnn_mpi/jobs/common.sh share/cnn_mpi/jobs/jobs-layout.sh
  share/doc/cnn_mpi/README.md share/doc/cnn_mpi/docs/SLURM.md share/doc/cnn_mpi/docs/ARCHITECTURE.md)
for file in "${expected[@]}"; do
  [[ -f $WORK/staged/$file ]] || fail "(a) $file not installed"
done
for program in bin/cnn_mpi bin/cnn_convert bin/cnn_peak share/cnn_mpi/jobs/train-cpu.sbatch; do
  [[ -x $WORK/staged/$program ]] || fail "(a) $program is not executable"
done
# Every doc of the source tree is installed, so that README's links into docs/ hold.
for doc in "$SOURCE_DIR"/docs/*.md; do
  [[ -f $WORK/staged/share/doc/cnn_mpi/docs/$(basename "$doc") ]] || fail "(a) docs/$(basename "$doc") not installed"
done

# --------------------------------------------------------- (b) nothing of the build tree needed
say "(b) the installed programs' libraries"
for program in cnn_mpi cnn_convert cnn_peak; do
  binary=$WORK/staged/bin/$program
  runpath=$(readelf -d "$binary" | sed -n 's/.*(\(RPATH\|RUNPATH\)).*\[\(.*\)\]/\2/p')
  [[ $runpath != *"$BUILD_DIR"* && $runpath != *"$SOURCE_DIR"* ]] || fail "(b) $program's RUNPATH names the build: $runpath"
  # Without the environment's LD_PRELOAD: the sanitizer tree preloads a library of its own build
  # directory into every process (tools/test-sanitizers.sh), which is not the binary's dependency.
  env -u LD_PRELOAD ldd "$binary" >"$WORK/ldd.txt" 2>&1 || { cat "$WORK/ldd.txt"; fail "(b) ldd $program failed"; }
  if grep -q 'not found' "$WORK/ldd.txt"; then grep 'not found' "$WORK/ldd.txt"; fail "(b) $program: libraries not found"; fi
  if grep -qF -e "$BUILD_DIR" -e "$SOURCE_DIR" "$WORK/ldd.txt"; then
    cat "$WORK/ldd.txt"
    fail "(b) $program loads a library from the build or source tree"
  fi
  say "$program: $(grep -c '=>' "$WORK/ldd.txt") libraries, RUNPATH [${runpath:-none}]"
done

# ------------------------------------------------ (c) the moved prefix, from outside the checkout
PREFIX=$WORK/shared/opt/cnn_mpi
mkdir -p "$(dirname "$PREFIX")"
mv "$WORK/staged" "$PREFIX"
JOBS=$PREFIX/share/cnn_mpi/jobs
mkdir -p "$WORK/elsewhere" "$WORK/submit/build"
# A submit directory with a build of its own: the installed scripts must not take it.
ln -s "$BUILD_DIR/cnn_mpi" "$WORK/submit/build/cnn_mpi"
clean_path=$(tr ':' '\n' <<<"$PATH" | while read -r dir; do [[ -x $dir/cnn_mpi ]] || echo "$dir"; done | paste -sd:)
small=(--epochs 1 --filters 4 --batch 100 --train-samples 1000 --test-samples 200)

say "(c) $PREFIX/bin/cnn_mpi trains, from $WORK/elsewhere"
(cd "$WORK/elsewhere" && PATH=$clean_path "$PREFIX/bin/cnn_mpi" "${small[@]}" --threads 1 --out run-direct) \
  >"$WORK/direct.out" 2>&1 || { cat "$WORK/direct.out"; fail "(c) the installed cnn_mpi failed"; }
[[ $(wc -l <"$WORK/elsewhere/run-direct/metrics.csv") -eq 2 ]] || fail "(c) the installed cnn_mpi's run has no epoch row"
"$PREFIX/bin/cnn_convert" --help >/dev/null || fail "(c) the installed cnn_convert --help failed"

say "(c) the installed job scripts name the installed binary"
for where in elsewhere submit; do
  for script in train-cpu train-gpu train-preemptible; do
    line=$(cd "$WORK/$where" && PATH=$clean_path DRY_RUN=1 GPUS_PER_NODE=2 bash "$JOBS/$script.sbatch")
    [[ $line == *" $PREFIX/bin/cnn_mpi train "* ]] || fail "(c) $script.sbatch from $where: expected $PREFIX/bin/cnn_mpi in: $line"
  done
done
# Submitted by sbatch, a script runs as a copy in SLURM's spool directory: it finds common.sh
# through CNN_JOBS_DIR (set here as the scripts set it from `scontrol show job`'s Command=).
cp "$JOBS/train-cpu.sbatch" "$WORK/spool-copy.sbatch"
line=$(cd "$WORK/elsewhere" && PATH=$clean_path DRY_RUN=1 CNN_JOBS_DIR=$JOBS bash "$WORK/spool-copy.sbatch")
[[ $line == *" $PREFIX/bin/cnn_mpi train "* ]] || fail "(c) a spool copy of train-cpu.sbatch: expected $PREFIX/bin/cnn_mpi in: $line"

say "(c) the installed train-cpu.sbatch trains 2 ranks (LAUNCHER=mpirun, no SLURM)"
rc=0
(cd "$WORK/elsewhere" && PATH=$clean_path:$(dirname "$(command -v mpirun)") LAUNCHER=mpirun \
  MPIRUN_EXTRA_ARGS=--oversubscribe CNN_OUT=$WORK/elsewhere/run-job CNN_EPOCHS=1 CNN_FILTERS=4 \
  CNN_TRAIN_SAMPLES=1000 CNN_TEST_SAMPLES=200 bash "$JOBS/train-cpu.sbatch") >"$WORK/job.out" 2>&1 || rc=$?
((rc == 0)) || { cat "$WORK/job.out"; fail "(c) the installed train-cpu.sbatch exited with $rc"; }
if ! grep -qF "run: mpirun -np 2" "$WORK/job.out" || ! grep -qF "$PREFIX/bin/cnn_mpi train" "$WORK/job.out"; then
  cat "$WORK/job.out"
  fail "(c) the job did not launch $PREFIX/bin/cnn_mpi under mpirun"
fi
grep -q 'rank 1/2 ' "$WORK/job.out" || { cat "$WORK/job.out"; fail "(c) the job did not run 2 ranks"; }
[[ $(wc -l <"$WORK/elsewhere/run-job/metrics.csv") -eq 2 ]] || fail "(c) the job's run has no epoch row"

# ----------------------------------------------------------------- (d) the checkout's own scripts
say "(d) the checkout's scripts take the submit directory's build/cnn_mpi"
line=$(cd "$WORK/submit" && DRY_RUN=1 bash "$SOURCE_DIR/jobs/train-cpu.sbatch")
[[ $line == *" $WORK/submit/build/cnn_mpi train "* ]] || fail "(d) expected $WORK/submit/build/cnn_mpi in: $line"
line=$(cd "$WORK/elsewhere" && CNN_BIN=/opt/other/cnn_mpi DRY_RUN=1 bash "$JOBS/train-cpu.sbatch")
[[ $line == *" /opt/other/cnn_mpi train "* ]] || fail "(d) CNN_BIN does not win over the installation: $line"

say "passed"
