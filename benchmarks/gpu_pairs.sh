#!/usr/bin/env bash
# The two-GPU proofs on a host of four GPUs, two pairs at a time, in one slot (default 560 s):
#   benchmarks/gpu_pairs.sh OUTDIR [DATADIR]
# OUTDIR/dlbench.db may hold an earlier run's store: every scale/comm command resumes from it.
# DATADIR: Fashion-MNIST's idx files for the time-to-accuracy lane (see train_proof.sh); without it
# that lane is skipped.
#
# Lanes run side by side on disjoint GPU pairs (0,1 and 2,3): they share the host's CPUs and PCIe
# root but no GPU; on an NVSwitch host no NVLink either. A lane's jobs are timed as alone on their
# GPUs; the store's environment record of each result names the visible GPUs.
#   lane 01, stage 1: scale of resnet50, inception_v3, vgg16, resnet152 in bf16, strategies dp
#                     and ps at 1 and 2 GPUs (ddp came from gpu_multi.sh).
#   lane 23, stage 1: the same four in fp32, ddp at 1 and 2 GPUs (resumed), and dp, ps for
#                     resnet50 and vgg16.
#   lane 01, stage 2: interconnect A/B of the four at 2 GPUs; comm at 2 ranks, all five
#                     collectives to 1 GiB; all_reduce under the no-p2p profiles (what-if check);
#                     the two-GPU energy test.
#   lane 23, stage 2: time to accuracy at 1 and 2 GPUs (benchmarks/train_proof.sh).
# The last lines print the tables.
set -uo pipefail
out=$1; data=${2:-}
mkdir -p "$out"
db=$out/dlbench.db
source "$(dirname "$0")/gpu_env.sh"
slot=${SLOT_SECONDS:-560}
end=$((SECONDS + slot))
stage1_end=$((SECONDS + slot * 11 / 20))   # stage 1 gets 55% of the slot
left1() { echo $((stage1_end - SECONDS > 5 ? stage1_end - SECONDS : 5)); }
py=python3
fast="--resume --warmup 3 --warmup-time 0.5 --min-steps 5 --min-time 1 --max-time 2.5 --timeout 200 --pg-timeout 120 -q"
four=resnet50,inception_v3,vgg16,resnet152
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit --format=csv
  nvidia-smi topo -m
  # -- stage 1 ---------------------------------------------------------------------------------
  ( export CUDA_VISIBLE_DEVICES=0,1
    timeout -s INT "$(left1)" $py -m dlbench scale -m $four --gpus 1,2 --strategy dp,ps \
        --precision bf16 --channels-last on $fast --db "$db" --tag scale-dp-ps ) 2>&1 | lane 01 &
  a=$!
  ( export CUDA_VISIBLE_DEVICES=2,3
    timeout -s INT "$(left1)" $py -m dlbench scale -m $four -b 256 --gpus 1,2 --precision fp32 \
        $fast --db "$db" --tag scale-fp32
    timeout -s INT "$(left1)" $py -m dlbench scale -m resnet50,vgg16 -b 256 --gpus 1,2 \
        --strategy dp,ps --precision fp32 $fast --db "$db" --tag scale-dp-ps ) 2>&1 | lane 23 &
  b=$!
  wait $a $b
  # -- stage 2 ---------------------------------------------------------------------------------
  ( export CUDA_VISIBLE_DEVICES=0,1
    timeout -s INT "$(left)" $py -m dlbench scale -m $four --gpus 2 \
        --interconnect default,no-p2p,no-p2p+no-shm --precision bf16 --channels-last on $fast \
        --db "$db" --tag interconnect
    timeout -s INT "$(left)" $py -m dlbench comm --gpus 2 --max 1GiB --iters 10 --warmup 3 \
        --op all_reduce,all_gather,reduce_scatter,broadcast,all_to_all --db "$db" --tag comm-2 -q
    timeout -s INT "$(left)" $py -m dlbench comm --gpus 2 --min 1MiB --max 1GiB --factor 4 \
        --op all_reduce --interconnect no-p2p,no-p2p+no-shm --iters 10 --warmup 3 \
        --db "$db" --tag comm-2-profiles -q
    timeout -s INT "$(left)" $py -m pytest -q -m gpu tests/test_distributed.py -p no:cacheprovider
  ) 2>&1 | lane 01 &
  a=$!
  if [ -n "$data" ]; then
    ( export CUDA_VISIBLE_DEVICES=2,3
      SLOT_SECONDS=$(($(left) - 20)) bash benchmarks/train_proof.sh "$out/train" "$data" 1,2 ) \
        2>&1 | lane 23 &
    b=$!
    wait $b
  fi
  wait $a
  # -- what came out ---------------------------------------------------------------------------
  $py -m dlbench results export --db "$db" --run all --format json -o "$out/all.json"
  $py -m dlbench report --db "$db" -o "$out/report.html"
  $py -m dlbench report --db "$db" --markdown -o "$out/tables.md"
  $py -m dlbench whatif --check --db "$db" --busbw-from "$db" > "$out/whatif-check.txt" 2>&1
  [ -d "$out/train" ] && tar -C "$out" -czf "$out/train.tgz" train && rm -rf "$out/train"
  grep -v '^$' "$out/tables.md" | grep -v -i 'environment' | cut -c1-150 | tail -n 70
  tail -n 25 "$out/whatif-check.txt"
} 2>&1 | tee "$out/pairs.log"
