#!/usr/bin/env bash
# On a host of 8 GPUs, in one slot (default 300 s): the strategies rerun on two pairs, then the
# 8-GPU scaling, interconnect A/B and collectives.
#   benchmarks/gpu_wide.sh OUTDIR
# Stage 1, side by side on disjoint pairs (GPUs 0-1, 2-3): dp (measured afresh since dp runs
#   without cuDNN autotuning) and ps, bf16, at 1 and 2 GPUs, for resnet50 and vgg16 on one pair,
#   inception_v3 and resnet152 on the other.
# Stage 2, every GPU: collectives at 8 ranks to 4 GiB; resnet50 and vgg16 (bf16) at 1 and 8 GPUs;
#   their interconnect A/B at 8 GPUs.
# Every command stops cleanly (SIGINT) at its stage's end and keeps what it measured.
set -uo pipefail
out=$1
mkdir -p "$out"
db=$out/dlbench.db
source "$(dirname "$0")/gpu_env.sh"
slot=${SLOT_SECONDS:-300}
end=$((SECONDS + slot)); stage1_end=$((SECONDS + slot * 2 / 5))
left1() { echo $((stage1_end - SECONDS > 5 ? stage1_end - SECONDS : 5)); }
py=python3
n=$(nvidia-smi -L | wc -l)
fast="--warmup 3 --warmup-time 0.5 --min-steps 5 --min-time 1 --max-time 2 --timeout 150 --pg-timeout 100 -q"
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit --format=csv
  nvidia-smi topo -m
  ( export CUDA_VISIBLE_DEVICES=0,1
    timeout -s INT "$(left1)" $py -m dlbench scale -m resnet50,vgg16 --gpus 1,2 --strategy dp,ps \
        --precision bf16 --channels-last on $fast --db "$db" --tag scale-dp-ps ) 2>&1 | lane 01 &
  a=$!
  ( export CUDA_VISIBLE_DEVICES=2,3
    timeout -s INT "$(left1)" $py -m dlbench scale -m inception_v3,resnet152 --gpus 1,2 \
        --strategy dp,ps --precision bf16 --channels-last on $fast --db "$db" \
        --tag scale-dp-ps ) 2>&1 | lane 23 &
  b=$!
  wait $a $b
  timeout -s INT "$(left)" $py -m dlbench comm --gpus "$n" --max 4GiB --iters 10 --warmup 3 \
      --op all_reduce,all_gather,reduce_scatter --db "$db" --tag comm -q
  timeout -s INT "$(left)" $py -m dlbench scale -m resnet50,vgg16 --gpus 1,"$n" --precision bf16 \
      --channels-last on $fast --db "$db" --tag scale-bf16
  timeout -s INT "$(left)" $py -m dlbench scale -m resnet50,vgg16 --gpus "$n" \
      --interconnect no-p2p,no-p2p+no-shm --precision bf16 --channels-last on $fast \
      --db "$db" --tag interconnect
  $py -m dlbench report --db "$db" --markdown -o "$out/tables.md"
  $py -m dlbench results export --db "$db" --run all --format json -o "$out/all.json"
  $py -m dlbench whatif --check --db "$db" --busbw-from "$db" > "$out/whatif-check.txt" 2>&1
  grep -v '^$' "$out/tables.md" | grep -v -i 'environment' | grep -v '^| all_\|^| reduce' \
      | cut -c1-160 | tail -n 50
  tail -n 6 "$out/whatif-check.txt"
} 2>&1 | tee "$out/wide.log"
