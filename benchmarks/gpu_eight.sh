#!/usr/bin/env bash
# The proofs that need at most four GPUs, on a host of eight, in four lanes side by side (one
# slot, default 530 s):
#   benchmarks/gpu_eight.sh OUTDIR DATADIR [TRAINDIR]
# OUTDIR/dlbench.db may hold an earlier store (the four-H200 host's): --resume skips what it holds
# for the same environment (same GPU model, count, driver and software; not the host name).
# DATADIR: Fashion-MNIST's idx files (see train_proof.sh). TRAINDIR: an earlier time-to-accuracy
# folder (its dlbench.db and mllog/) to add to; the result comes back as OUTDIR/train.tgz.
#
# Lanes run on disjoint GPUs: they share the host's CPUs but no GPU, and each result's
# environment record names the GPUs it saw.
#   GPUs 0-1  the two-GPU energy test; dp (measured afresh: see gpu_strategies.sh) and ps for
#             resnet50, inception_v3, vgg16, resnet152 in bf16 and resnet50, vgg16 in fp32, at 1
#             and 2 GPUs; then seed 003's batch table (256, 1024, 2048 per GPU) at 2 GPUs.
#   GPU 2     maxbatch, bf16 and fp32: resnet50, resnet152, inception_v3, inception_v4, gpt2.
#   GPU 3     maxbatch, bf16 and fp32: vgg16, densenet161, vit_b_16, nasnet.
#   GPUs 4-7  fp32 ddp scaling of the six seed-000 models at 1/2/4 GPUs (resumed), NASNet bf16 at
#             4 GPUs, then time to accuracy at 4 GPUs (5 seeds, MLPerf-style).
# Every command stops cleanly (SIGINT) at its lane's end and keeps what it measured. The last
# lines print the tables.
set -uo pipefail
out=$1; data=$2; traindir=${3:-}
mkdir -p "$out"
db=$out/dlbench.db
source "$(dirname "$0")/gpu_env.sh"
slot=${SLOT_SECONDS:-530}
end=$((SECONDS + slot))
stage1_end=$((SECONDS + slot * 3 / 5))      # lane 0-1's strategies get 60% of the slot
left1() { echo $((stage1_end - SECONDS > 5 ? stage1_end - SECONDS : 5)); }
py=python3
fast="--warmup 3 --warmup-time 0.5 --min-steps 5 --min-time 1 --max-time 2.5 --timeout 200 --pg-timeout 120 -q"
four=resnet50,inception_v3,vgg16,resnet152
train=/tmp/dlbench-train                      # many small files: tarred into OUTDIR at the end
mkdir -p "$train/mllog"
[ -n "$traindir" ] && cp -r "$traindir"/dlbench.db "$traindir"/mllog "$train"/
tcommon=(--dataset fashion-mnist --data-dir "$data" -m cnn10 --target 0.90 --precision bf16
         --db "$train/dlbench.db" --log-dir "$train/mllog" --timeout 600)
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit --format=csv
  ( export CUDA_VISIBLE_DEVICES=0,1
    timeout -s INT 60 $py -m pytest -q -m gpu tests/test_distributed.py -p no:cacheprovider
    timeout -s INT "$(left1)" $py -m dlbench scale -m $four --gpus 1,2 --strategy dp \
        --precision bf16 --channels-last on $fast --db "$db" --tag scale-dp
    timeout -s INT "$(left1)" $py -m dlbench scale -m resnet50,vgg16 -b 256 --gpus 1,2 \
        --strategy dp --precision fp32 $fast --db "$db" --tag scale-dp
    timeout -s INT "$(left1)" $py -m dlbench scale -m $four --gpus 1,2 --strategy ps \
        --precision bf16 --channels-last on --resume $fast --db "$db" --tag scale-ps
    timeout -s INT "$(left1)" $py -m dlbench scale -m resnet50,vgg16 -b 256 --gpus 1,2 \
        --strategy ps --precision fp32 --resume $fast --db "$db" --tag scale-ps
    timeout -s INT "$(left)" $py -m dlbench train "${tcommon[@]}" --gpus 2 -b 256,1024,2048 \
        --seeds 1 --max-epochs 20 --tag train-batches -q ) 2>&1 | lane 01 &
  maxbatch_lane 2 resnet50,resnet152,inception_v3,inception_v4,gpt2 "$db" &
  maxbatch_lane 3 vgg16,densenet161,vit_b_16,nasnet "$db" &
  ( export CUDA_VISIBLE_DEVICES=4,5,6,7
    timeout -s INT "$(left)" $py -m dlbench scale -m $four,inception_v4 -b 256 --gpus 1,2,4 \
        --precision fp32 --resume $fast --db "$db" --tag scale-fp32
    timeout -s INT "$(left)" $py -m dlbench scale -m nasnet -b 64 --gpus 1,2,4 --precision fp32 \
        --resume $fast --db "$db" --tag scale-fp32
    timeout -s INT "$(left)" $py -m dlbench scale -m nasnet --gpus 4 --precision bf16 \
        --channels-last on --resume $fast --db "$db" --tag scale-bf16
    timeout -s INT "$(left)" $py -m dlbench train "${tcommon[@]}" --gpus 4 -b 512 --seeds 5 \
        --max-epochs 15 --tag train-mlperf -q ) 2>&1 | lane 4567 &
  wait
  # -- what came out ---------------------------------------------------------------------------
  bash "$(dirname "$0")/mlperf_check.sh" "$train/mllog" "$train/compliance.txt" | tail -n 4
  $py -m dlbench results export --db "$train/dlbench.db" --format json -o "$train/train.json"
  $py -m dlbench report --db "$train/dlbench.db" --markdown -o "$train/tables.md" \
      --title "dlbench train proof"
  tar -C "$(dirname "$train")" -czf "$out/train.tgz" "$(basename "$train")"
  $py -m dlbench results export --db "$db" --run all --format json -o "$out/all.json"
  $py -m dlbench report --db "$db" --markdown -o "$out/tables.md"
  $py -m dlbench whatif --check --db "$db" --busbw-from "$db" > "$out/whatif-check.txt" 2>&1
  grep -v '^$' "$train/tables.md" | grep -v -i 'environment' | cut -c1-150 | tail -n 25
  grep -v '^$' "$out/tables.md" | grep -v -i 'environment' | grep -v '^| all_\|^| reduce' \
      | cut -c1-150 | tail -n 60
} 2>&1 | tee "$out/eight.log"
