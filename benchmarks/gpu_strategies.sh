#!/usr/bin/env bash
# Seed 003/004's strategies on two GPUs: nn.DataParallel (dp) and the parameter server (ps)
# beside DDP, at 1 and 2 GPUs, in one slot (default 330 s):
#   benchmarks/gpu_strategies.sh OUTDIR
# OUTDIR/dlbench.db may hold an earlier store. ps resumes from it; dp is measured afresh, because
# dp records taken before dlbench turned cuDNN autotuning off for dp (it autotuned again on every
# step: see workloads/throughput.py, precision_flags) have the same config key; the report shows
# the later record of a config. Then the two-GPU energy test (tests/test_distributed.py, -m gpu).
set -uo pipefail
out=$1
mkdir -p "$out"
db=$out/dlbench.db
source "$(dirname "$0")/gpu_env.sh"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1}
end=$((SECONDS + ${SLOT_SECONDS:-330}))
py=python3
fast="--warmup 3 --warmup-time 0.5 --min-steps 5 --min-time 1 --max-time 2.5 --timeout 200 --pg-timeout 120 -q"
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  timeout -s INT 60 $py -m pytest -q -m gpu tests/test_distributed.py -p no:cacheprovider
  timeout -s INT "$(left)" $py -m dlbench scale -m resnet50,inception_v3,vgg16,resnet152 \
      --gpus 1,2 --strategy dp --precision bf16 --channels-last on $fast --db "$db" --tag scale-dp
  timeout -s INT "$(left)" $py -m dlbench scale -m vgg16,resnet152 --gpus 1,2 --strategy ps \
      --precision bf16 --channels-last on --resume $fast --db "$db" --tag scale-dp-ps
  timeout -s INT "$(left)" $py -m dlbench scale -m resnet50,vgg16 -b 256 --gpus 1,2 \
      --strategy dp --precision fp32 $fast --db "$db" --tag scale-dp
  timeout -s INT "$(left)" $py -m dlbench scale -m resnet50,vgg16 -b 256 --gpus 1,2 \
      --strategy ps --precision fp32 --resume $fast --db "$db" --tag scale-dp-ps
  $py -m dlbench report --db "$db" --markdown -o "$out/tables.md"
  $py -m dlbench results export --db "$db" --run all --format json -o "$out/all.json"
  grep -A12 "by GPU count (default" "$out/tables.md" | cut -c1-160
} 2>&1 | tee "$out/strategies.log"
