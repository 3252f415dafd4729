#!/usr/bin/env bash
# What gpu_eight.sh's first call left, in a second, shorter slot on a host of eight (default
# 290 s), resuming the store that call wrote:
#   benchmarks/gpu_eight_rest.sh OUTDIR DATADIR TRAINDIR
# OUTDIR/dlbench.db: gpu_eight.sh's store; TRAINDIR: its time-to-accuracy folder (from train.tgz).
#   GPUs 0-1  ps for the models it did not reach: vgg16, resnet152 in bf16; resnet50, vgg16 in
#             fp32 (resumed), at 1 and 2 GPUs.
#   GPU 2/3   the maxbatch searches, resumed (fp32 of the models whose bf16 search ended).
#   GPUs 4-7  time to accuracy at 4 GPUs (5 seeds, MLPerf-style), NASNet bf16 at 4 GPUs, then
#             fp32 scaling of resnet152 and inception_v4 at 1/2/4 GPUs (resumed).
set -uo pipefail
out=$1; data=$2; traindir=$3
db=$out/dlbench.db
source "$(dirname "$0")/gpu_env.sh"
end=$((SECONDS + ${SLOT_SECONDS:-290}))
py=python3
fast="--resume --warmup 3 --warmup-time 0.5 --min-steps 5 --min-time 1 --max-time 2.5 --timeout 200 --pg-timeout 120 -q"
train=/tmp/dlbench-train
mkdir -p "$train" && cp -r "$traindir"/dlbench.db "$traindir"/mllog "$train"/
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit --format=csv
  ( export CUDA_VISIBLE_DEVICES=0,1
    timeout -s INT "$(left)" $py -m dlbench scale -m vgg16,resnet152 --gpus 1,2 --strategy ps \
        --precision bf16 --channels-last on $fast --db "$db" --tag scale-ps
    timeout -s INT "$(left)" $py -m dlbench scale -m resnet50,vgg16 -b 256 --gpus 1,2 \
        --strategy ps --precision fp32 $fast --db "$db" --tag scale-ps ) 2>&1 | lane 01 &
  maxbatch_lane 2 resnet50,resnet152,inception_v3,inception_v4,gpt2 "$db" &
  maxbatch_lane 3 vgg16,densenet161,vit_b_16,nasnet "$db" &
  ( export CUDA_VISIBLE_DEVICES=4,5,6,7
    timeout -s INT "$(left)" $py -m dlbench train --dataset fashion-mnist --data-dir "$data" \
        -m cnn10 --target 0.90 --precision bf16 --db "$train/dlbench.db" --log-dir "$train/mllog" \
        --timeout 300 --gpus 4 -b 512 --seeds 5 --max-epochs 15 --tag train-mlperf -q
    timeout -s INT "$(left)" $py -m dlbench scale -m nasnet --gpus 4 --precision bf16 \
        --channels-last on $fast --db "$db" --tag scale-bf16
    timeout -s INT "$(left)" $py -m dlbench scale -m resnet152,inception_v4 -b 256 --gpus 1,2,4 \
        --precision fp32 $fast --db "$db" --tag scale-fp32 ) 2>&1 | lane 4567 &
  wait
  bash "$(dirname "$0")/mlperf_check.sh" "$train/mllog" "$train/compliance.txt" | tail -n 6
  $py -m dlbench results export --db "$train/dlbench.db" --format json -o "$train/train.json"
  $py -m dlbench report --db "$train/dlbench.db" --markdown -o "$train/tables.md" \
      --title "dlbench train proof"
  tar -C "$(dirname "$train")" -czf "$out/train.tgz" "$(basename "$train")"
  $py -m dlbench report --db "$db" --markdown -o "$out/tables.md"
  grep -A6 "Time to train" "$train/tables.md" | cut -c1-150
  grep -A30 "by GPU count (default" "$out/tables.md" | cut -c1-150
  grep -A22 "Largest batch" "$out/tables.md" | cut -c1-200
} 2>&1 | tee "$out/rest.log"
