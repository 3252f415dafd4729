#!/usr/bin/env bash
# The multi-GPU proof on one host of 2 to 8 GPUs, in one slot (default 560 s):
#   benchmarks/gpu_multi.sh OUTDIR
# Phase A (GPUs 0,1): scale at 1 and 2 GPUs: the six seed-000 models (bf16, ddp), four of them in
#   fp32, ddp vs dp vs ps. Meanwhile single-GPU work on the otherwise idle GPUs: GPU 2 measures
#   the card's ceilings and the default suite (MFU on this GPU kind), GPU 3 the largest batches.
#   They share the host (CPU, PCIe) but no GPU and no NVLink traffic with the scaling jobs.
# Phase B (every GPU): scale at N GPUs, interconnect A/B at 2 and N GPUs, collectives at 2 and N.
# Every command's results go to OUTDIR/dlbench.db as they finish; a command cut by the slot stops
# cleanly (SIGINT) and keeps what it measured, and a rerun with OUTDIR's store resumes (--resume).
# The last lines print the tables.
# Budget: on a 4x H200 host each scale config took about 20 s (process start, model build, cuDNN
# autotuning; fp32 first steps up to a minute), so the whole matrix needs two or three slots.
set -uo pipefail
out=$1
mkdir -p "$out"
db=$out/dlbench.db
source "$(dirname "$0")/gpu_env.sh"
end=$((SECONDS + ${SLOT_SECONDS:-560}))
py=python3
n=$(nvidia-smi -L | wc -l)
fast="--resume --warmup 3 --warmup-time 0.5 --min-steps 5 --min-time 1 --max-time 3 --timeout 240 --pg-timeout 120 -q"
seed6=resnet50,inception_v3,vgg16,resnet152,inception_v4,nasnet
four=resnet50,inception_v3,vgg16,resnet152
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit --format=csv
  nvidia-smi topo -m
  # -- phase A ---------------------------------------------------------------------------------
  if [ "$n" -ge 4 ]; then
    ( export CUDA_VISIBLE_DEVICES=2
      $py -m dlbench peak --db "$db" --tag peak-h200 > "$out/peak.txt" 2>&1
      timeout -s INT 330 $py -m dlbench run --db "$db" --tag default-suite-h200 -q \
          > "$out/default-suite.txt" 2>&1 ) &
    side1=$!
    ( export CUDA_VISIBLE_DEVICES=3
      timeout -s INT 340 $py -m dlbench maxbatch -m resnet50,vgg16,vit_b_16,gpt2 \
          --precision bf16,fp32 --channels-last --tolerance 0.1 --max-time 3 --db "$db" \
          --tag maxbatch-h200 -q > "$out/maxbatch.txt" 2>&1 ) &
    side2=$!
  fi
  export CUDA_VISIBLE_DEVICES=0,1
  timeout -s INT "$(left)" $py -m dlbench scale -m $seed6 --gpus 1,2 --precision bf16 \
      --channels-last on $fast --db "$db" --tag scale-bf16
  timeout -s INT "$(left)" $py -m dlbench scale -m $four -b 256 --gpus 1,2 --precision fp32 \
      $fast --db "$db" --tag scale-fp32
  timeout -s INT "$(left)" $py -m dlbench scale -m resnet50,vgg16 --gpus 1,2 --strategy dp,ps \
      --precision bf16 --channels-last on $fast --db "$db" --tag scale-dp-ps
  [ -n "${side1:-}" ] && wait $side1 $side2
  unset CUDA_VISIBLE_DEVICES
  # -- phase B ---------------------------------------------------------------------------------
  if [ "$n" -gt 2 ]; then
    timeout -s INT "$(left)" $py -m dlbench scale -m $seed6 --gpus "$n" --precision bf16 \
        --channels-last on $fast --db "$db" --tag scale-bf16
  fi
  timeout -s INT "$(left)" $py -m dlbench comm --gpus "$n" --max 4GiB --iters 10 --warmup 3 \
      --db "$db" --tag comm -q
  timeout -s INT "$(left)" $py -m dlbench scale -m resnet50,vgg16 --gpus 2,$n \
      --interconnect default,no-p2p,no-p2p+no-shm --precision bf16 --channels-last on $fast \
      --db "$db" --tag interconnect
  [ "$n" -gt 2 ] && timeout -s INT "$(left)" $py -m dlbench comm --gpus 2 --max 1GiB --iters 10 \
      --warmup 3 --db "$db" --tag comm -q
  [ "$n" -gt 2 ] && timeout -s INT "$(left)" $py -m dlbench scale -m resnet50,vgg16 -b 256 \
      --gpus "$n" --precision fp32 $fast --db "$db" --tag scale-fp32
  # -- what came out ---------------------------------------------------------------------------
  $py -m dlbench results export --db "$db" --run all --format json -o "$out/all.json"
  $py -m dlbench report --db "$db" -o "$out/report.html"
  $py -m dlbench report --db "$db" --markdown -o "$out/tables.md"
  tail -n 12 "$out"/peak.txt "$out"/default-suite.txt "$out"/maxbatch.txt 2>/dev/null
  $py -m dlbench results ls --db "$db"
  grep -v '^$' "$out/tables.md" | grep -v -i 'environment' | cut -c1-160 | tail -n 90
} 2>&1 | tee "$out/multi.log"
