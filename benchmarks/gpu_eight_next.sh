#!/usr/bin/env bash
# What the multi-GPU issues still lack, for the next calls on a host of eight H200 (written
# before it ran; each stage resumes its store, so a cut call is rerun as it is):
#   benchmarks/gpu_eight_next.sh lanes OUTDIR DATADIR     (OUTDIR/dlbench.db: the 4x store)
#   benchmarks/gpu_eight_next.sh wide  OUTDIR DATADIR     (OUTDIR/dlbench.db: the 8x store)
# lanes, side by side on disjoint GPUs (slot default 540 s):
#   GPUs 0-1  dp and ps in fp32 for inception_v3, resnet152 and vgg16 at 1 and 2 GPUs.
#   GPU 2/3   maxbatch of the seed and modern models, bf16 and fp32 (resumed).
#   GPUs 4-7  fp32 ddp of inception_v4 and nasnet at 1/2/4 GPUs (on a host of eight; on a
#             host of four, GPUs 0 and 1 go on to the maxbatch of those two models instead).
# four, a host of four (OUTDIR/dlbench.db: the 4x store): fp32 ddp of inception_v4 and nasnet,
#   1 GPU (GPU 0) and 2 GPUs (GPUs 2-3) side by side, then all four; then maxbatch lanes on
#   the four GPUs until the slot ends.
# memory4, a host of four (OUTDIR/dlbench.db: the 4x store): maxbatch lanes on the four GPUs.
# wide, every GPU (slot default 540 s): the interconnect A/B at 8 GPUs for resnet50 and vgg16,
#   the other seed models in bf16 at 1 and 8 GPUs, time to accuracy at 8 GPUs (5 seeds), the six
#   seed models in fp32 at 1 and 8 GPUs; then the what-if check.
set -uo pipefail
stage=$1; out=$2; data=$3
db=$out/dlbench.db
source "$(dirname "$0")/gpu_env.sh"
end=$((SECONDS + ${SLOT_SECONDS:-540}))
py=python3
fast="--resume --warmup 3 --warmup-time 0.5 --min-steps 5 --min-time 1 --max-time 2.5 --timeout 300 --pg-timeout 120 -q"
train=/tmp/dlbench-train
mkdir -p "$train/mllog"
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit --format=csv
  case $stage in
    lanes)
      ( export CUDA_VISIBLE_DEVICES=0,1
        timeout -s INT "$(left)" $py -m dlbench scale -m inception_v3,resnet152,vgg16 -b 256 \
            --gpus 1,2 --strategy dp,ps --precision fp32 $fast --db "$db" --tag scale-dp-ps
      ) 2>&1 | lane 01 & pair=$!
      if [ "$(nvidia-smi -L | wc -l)" -ge 8 ]; then
        maxbatch_lane 2 resnet50,resnet152,inception_v3,inception_v4,gpt2 "$db" &
        maxbatch_lane 3 vgg16,densenet161,vit_b_16,nasnet "$db" &
        ( export CUDA_VISIBLE_DEVICES=4,5,6,7
          timeout -s INT "$(left)" $py -m dlbench scale -m inception_v4 -b 256 --gpus 1,2,4 \
              --precision fp32 $fast --db "$db" --tag scale-fp32
          timeout -s INT "$(left)" $py -m dlbench scale -m nasnet -b 64 --gpus 1,2,4 \
              --precision fp32 $fast --db "$db" --tag scale-fp32 ) 2>&1 | lane 4567 &
      else
        # A four-GPU host: GPUs 2 and 3 search from the start; GPUs 0 and 1 take the two
        # slowest searches once their scaling runs are done.
        maxbatch_lane 2 resnet50,resnet152,inception_v3,gpt2 "$db" &
        maxbatch_lane 3 vgg16,densenet161,vit_b_16 "$db" &
        wait "$pair"
        maxbatch_lane 0 inception_v4 "$db" &
        maxbatch_lane 1 nasnet "$db" &
      fi
      wait
      ;;
    four)
      for model in "inception_v4 -b 256" "nasnet -b 64"; do
        ( export CUDA_VISIBLE_DEVICES=0
          timeout -s INT "$(left)" $py -m dlbench scale -m $model --gpus 1 --precision fp32 \
              $fast --db "$db" --tag scale-fp32 ) 2>&1 | lane 0 &
        ( export CUDA_VISIBLE_DEVICES=2,3
          timeout -s INT "$(left)" $py -m dlbench scale -m $model --gpus 2 --precision fp32 \
              $fast --db "$db" --tag scale-fp32 ) 2>&1 | lane 23 &
        wait
      done
      for model in "inception_v4 -b 256" "nasnet -b 64"; do
        timeout -s INT "$(left)" $py -m dlbench scale -m $model --gpus 4 --precision fp32 \
            $fast --db "$db" --tag scale-fp32
      done
      # The rest of the slot: the largest-batch searches, one lane per GPU (resumed; a search
      # cut by the slot's end keeps its probes for the next call).
      maxbatch_lane 0 resnet152,gpt2 "$db" &
      maxbatch_lane 1 inception_v3,vit_b_16 "$db" &
      maxbatch_lane 2 densenet161,resnet50 "$db" &
      maxbatch_lane 3 vgg16,inception_v4,nasnet "$db" &
      wait
      ;;
    memory4)
      # Every GPU of a host of four searches the largest batches still missing, bf16 and fp32
      # (resumed: stored searches are skipped, interrupted ones go on from their probes, and a
      # stored search not yet measured is measured). fp32 probes take minutes each (cuDNN
      # autotunes true fp32 convolutions on the first step), so each lane pairs a slow model
      # with a quicker one.
      maxbatch_lane 0 gpt2,vgg16 "$db" &
      maxbatch_lane 1 vit_b_16,resnet50 "$db" &
      maxbatch_lane 2 resnet152,inception_v4 "$db" &
      maxbatch_lane 3 inception_v3,densenet161,nasnet "$db" &
      wait
      ;;
    wide)
      timeout -s INT "$(left)" $py -m dlbench scale -m resnet50,vgg16 --gpus 8 \
          --interconnect no-p2p,no-p2p+no-shm --precision bf16 --channels-last on $fast \
          --db "$db" --tag interconnect
      timeout -s INT "$(left)" $py -m dlbench scale -m inception_v3,resnet152,inception_v4,nasnet \
          --gpus 1,8 --precision bf16 --channels-last on $fast --db "$db" --tag scale-bf16
      timeout -s INT "$(left)" $py -m dlbench train --dataset fashion-mnist --data-dir "$data" \
          -m cnn10 --target 0.90 --precision bf16 --db "$train/dlbench.db" \
          --log-dir "$train/mllog" --timeout 300 --gpus 8 -b 512 --seeds 5 --max-epochs 15 \
          --tag train-mlperf -q
      timeout -s INT "$(left)" $py -m dlbench scale -m resnet50,inception_v3,vgg16,resnet152,inception_v4 \
          -b 256 --gpus 1,8 --precision fp32 $fast --db "$db" --tag scale-fp32
      timeout -s INT "$(left)" $py -m dlbench scale -m nasnet -b 64 --gpus 1,8 --precision fp32 \
          $fast --db "$db" --tag scale-fp32
      bash "$(dirname "$0")/mlperf_check.sh" "$train/mllog" "$train/compliance.txt" | tail -n 6
      tar -C "$(dirname "$train")" -czf "$out/train.tgz" "$(basename "$train")"
      $py -m dlbench whatif --check --db "$db" --busbw-from "$db" > "$out/whatif-check.txt" 2>&1
      ;;
    *) echo "stage: lanes, four, memory4 or wide"; exit 2 ;;
  esac
  $py -m dlbench report --db "$db" --markdown -o "$out/tables.md"
  grep -A40 "by GPU count (default" "$out/tables.md" | cut -c1-150
} 2>&1 | tee "$out/$stage.log"
