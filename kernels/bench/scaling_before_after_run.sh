#!/usr/bin/env bash
# One device call (nvidia-h200-x4) that times the multi-GPU seed step before and after a change:
# builds this tree ("after") and BEFORE_DIR (a checkout of the earlier commit inside the checkout, so
# that it travels: `mkdir .carry/before && git archive REV | tar -x -C .carry/before`) in parallel, then runs the steps
# named in STEPS (default: all four, in this order):
#   tests  gpu_peer_allreduce_test.sh (2 and 4 ranks, bitwise against the rank-order sum, and the
#          trainer on peer memory), gpu_backend_kernels' divergence-check and optimizer cases and
#          gpu_backend's fc-first case, on the after tree;
#   cost   (only when named) gpu_backend's measure_fc_first: the fc-first backward against the fused
#          one on one GPU, at the benchmark's per-rank batches;
#   micro  the allreduce alone (gpu_mpi_peer_allreduce --run_test=measure_allreduce_time), before
#          and after, on 2 ranks and, with 4 GPUs, on 4;
#   rows   tools/bench-scaling.sh on the configurations in ROWS (default: the three rows of issue 9
#          short of 10x DDP, and the two 1-GPU rows) over the GPU counts in GPUS (default "1 2 4"),
#          before and after alternated ROUNDS times (2); with FORCED_CUTS=N also the after tree with
#          CNN_OVERLAP_CUTS=N (the bucket grouping forced, e.g. 1 = fc-first, 0 = one bucket);
#   train  gpu_overlap_test.sh and gpu_train_test.sh on the after tree;
#   table  (only when named) the after tree's whole tools/bench-scaling.sh over GPUS, with the
#          PyTorch DDP anchor in the same call.
# Usage, from the tree: BEFORE_DIR=.carry/before OUT=$OUT [STEPS=...] bash kernels/bench/scaling_before_after_run.sh
set -uo pipefail
before=${BEFORE_DIR:-.carry/before}
out=${OUT:-gpu-out}; mkdir -p "$out"
steps=" ${STEPS:-tests micro rows train} "
rows=${ROWS:-"n2-d64-weak n4-d64-weak n4-d256-strong n1-d64-weak n1-d256-weak"}
gpus=$(nvidia-smi -L | grep -c '^GPU')
read -ra gpu_counts <<<"${GPUS:-1 2 4}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CNN_FASHION_DIR=$PWD/.carry/fashion-mnist CNN_MNIST_DIR=$PWD/.carry/mnist
source kernels/bench/device_run_lib.sh
start=$(date +%s)
nvidia-smi -L; date -u +%FT%TZ
(configure . build after && ninja -C build -j 40 cnn_mpi gpu_backend gpu_backend_kernels gpu_mpi_peer_allreduce >"$out/build-after.log" 2>&1
 echo "after build $?") &
(configure "$before" "$before/build-before" before &&
 ninja -C "$before/build-before" -j 20 cnn_mpi gpu_mpi_peer_allreduce >"$out/build-before.log" 2>&1
 echo "before build $?") &
wait; echo "built at $(($(date +%s) - start)) s"

if [[ $steps == *" tests "* ]]; then
  run 240 peer bash tests/gpu_peer_allreduce_test.sh build .; grep -E "^(ok|FAIL|SKIP)" "$out/peer.log"
  run 180 nonfinite build/tests/gpu_backend_kernels --run_test=nonfinite_check_finds_the_first_and_gates_the_update,optimizer_kernels_match_cpu_twins
  tail -1 "$out/nonfinite.log"
  run 180 fc-first build/tests/gpu_backend --run_test=fc_first_backward_gives_the_fused_bits
  tail -1 "$out/fc-first.log"
fi
if [[ $steps == *" cost "* ]]; then
  run 150 cost build/tests/gpu_backend --run_test=measure_fc_first; grep -E "^(batch|[0-9])" "$out/cost.log"
fi
if [[ $steps == *" micro "* ]]; then
  for ranks in 2 4; do
    ((ranks <= gpus)) || continue
    for v in before after; do
      tree=build; [[ $v == before ]] && tree="$before/build-before"
      run 60 "micro-$v-$ranks" mpirun -np "$ranks" --bind-to none -x NCCL_NVLS_ENABLE "$tree/tests/gpu_mpi_peer_allreduce" \
        --run_test=measure_allreduce_time
      echo "$v:"; grep "^measure_allreduce_time" "$out/micro-$v-$ranks.log"
    done
  done
fi
if [[ $steps == *" rows "* ]]; then
  variants="before after${FORCED_CUTS:+ after-cuts$FORCED_CUTS}"
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for v in $variants; do
      tree=build; [[ $v == before ]] && tree="$before/build-before"
      cuts=(); [[ $v == after-cuts* ]] && cuts=(env "CNN_OVERLAP_CUTS=${v#after-cuts}")
      "${cuts[@]}" env BINARY="$tree/cnn_mpi" OUT="$out/rows-$v-$round" SKIP_DDP=1 OVERLAPS=on EPOCHS=5 RUN_TIMEOUT=60 \
        ONLY="$rows" tools/bench-scaling.sh "${gpu_counts[@]}" >"$out/rows-$v-$round.log" 2>&1
      echo "$v round $round:"; grep -E "^[0-9]+ +(64|256) " "$out/rows-$v-$round.log"
    done
  done
fi
echo "at $(($(date +%s) - start)) s"
if [[ $steps == *" train "* ]]; then
  run 200 overlap bash tests/gpu_overlap_test.sh build .; grep -E "^(ok|FAIL|SKIP)" "$out/overlap.log"
  run 300 train bash tests/gpu_train_test.sh build .; grep -E "^(ok|FAIL|skip|SKIP)" "$out/train.log"
fi
if [[ $steps == *" table "* ]]; then
  BINARY=build/cnn_mpi OUT=$out/table OVERLAPS=on EPOCHS=5 RUN_TIMEOUT=60 tools/bench-scaling.sh "${gpu_counts[@]}" \
    >"$out/table.log" 2>&1
  tail -16 "$out/table.log"
fi
echo "total: $(($(date +%s) - start)) s"
